# Licensed to the Apache Software Foundation (ASF) under one
# or more contributor license agreements.  See the NOTICE file
# distributed with this work for additional information
# regarding copyright ownership.  The ASF licenses this file
# to you under the Apache License, Version 2.0 (the
# "License"); you may not use this file except in compliance
# with the License.  You may obtain a copy of the License at
#
#   http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an
# "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
# KIND, either express or implied.  See the License for the
# specific language governing permissions and limitations
# under the License.
"""Upstream's review checks, as ours: run on a materialized tree, per patch where upstream's would.

Upstream Airflow enforces these with prek hooks and CI jobs that this repository cannot run (they
need the whole monorepo). Each check here is our own implementation of the rule the hook enforces,
written from what the hook checks, and applied to what the series changes:

``revision-heads-map``
    ``_REVISION_HEADS_MAP`` in ``utils/db.py`` maps every Airflow version to the last migration
    revision carrying that ``airflow_version``; the migrations form one chain with one head.
``ti-history-columns``
    Every column the series adds to ``TaskInstance`` is on ``TaskInstanceHistory`` too (the history
    copies same-named columns; a column missing there is silently lost when a try is archived).
``execution-api-versions``
    A patch that changes an Execution API datamodel or route also changes ``execution_api/versions/``
    (a Cadwyn version change); a patch that changes an existing body in the supervisor schema
    snapshot also changes ``execution_time/schema/versions/`` (see that directory's AGENTS.md).
``cadwyn-response-defaults``
    A field that a response-converting ``VersionChange`` declares ``didnt_exist`` has a default on
    its HEAD class (otherwise FastAPI re-validates the stripped body and old clients get a 500).
``licence-header``
    Every file a patch adds carries the full ASF licence header.
``config-options``
    Every ``config.yml`` option the series adds has a description, ``version_added``, a known type,
    an example and a default.
``metrics-registry``
    Every metric name the series emits is in ``metrics_template.yaml``; nothing imports ``incr`` and
    friends from the stats module directly.
``generated-in-patch``
    A patch that changes the fields of a model that a generated file holds (the supervisor
    ``schema.json`` for the comms and callback-request models, the task-sdk ``_generated.py`` for
    the Execution API datamodels, the REST specs for the public and UI API datamodels) regenerates
    that file in the *same* patch, as upstream's prek hooks make each commit do; not a later patch.
``ruff``
    The Python files the series adds or changes hold no lint finding that the pristine file did
    not (upstream's ruff rules that do not depend on per-directory settings: import order, pyflakes,
    pycodestyle, pyupgrade for Python 3.10, logging calls), and every Python file the series adds is
    ``ruff format``-clean; settings are upstream's root ones (``dev/generator-root/pyproject.toml``).
    The only check that needs a tool: ``ruff`` from the venv (pinned in each line's ``lines/<line>/constraints.txt``).
``newsfragments``
    A newsfragment a patch adds is named ``<id>.<type>.rst`` with one of towncrier's types, and a
    ``significant`` one carries the template's "Types of change" (one box ticked) and
    "Migration rules needed" sections.
``operator-docs``
    Ours, not upstream's: every ``config.yml`` option the series adds is in the operator guide
    (``docs/operations.md``) and in the Helm values (``monitoring/helm-values.yaml``, under
    ``config: <section>:``); every metric the series adds to ``metrics_template.yaml`` is in the
    operator guide and matched by a mapping of ``monitoring/statsd-mappings.yml`` (with the default
    ``airflow.`` prefix). The documents are the repository's (``pstool.paths.DOCS_ROOT``).

Everything else is stdlib-only (``ast`` for Python, line-oriented reading of the two YAML files,
whose layout upstream keeps fixed), so those checks run before any virtualenv exists.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pstool.checks.base import BASE_REF, Finding, Tree
from pstool.checks.config import check_config_options
from pstool.checks.execution_api import (
    check_cadwyn_response_defaults,
    check_execution_api_versions,
)
from pstool.checks.generated import check_generated_in_patch
from pstool.checks.licence import check_licence_header
from pstool.checks.metrics import check_metrics_registry
from pstool.checks.migrations import check_revision_heads_map, check_ti_history_columns
from pstool.checks.newsfragments import check_newsfragments
from pstool.checks.operator_docs import (
    check_operator_docs,
    new_config_options,
    new_metrics,
)
from pstool.checks.ruff import _ruff, check_ruff

__all__ = [
    "BASE_REF",
    "CHECKS",
    "Finding",
    "Tree",
    "_ruff",
    "new_config_options",
    "new_metrics",
    "run_checks",
]

CHECKS: dict[str, Callable[[Tree], list[Finding]]] = {
    "revision-heads-map": check_revision_heads_map,
    "ti-history-columns": check_ti_history_columns,
    "execution-api-versions": check_execution_api_versions,
    "cadwyn-response-defaults": check_cadwyn_response_defaults,
    "licence-header": check_licence_header,
    "config-options": check_config_options,
    "metrics-registry": check_metrics_registry,
    "newsfragments": check_newsfragments,
    "generated-in-patch": check_generated_in_patch,
    "operator-docs": check_operator_docs,
    "ruff": check_ruff,
}


def run_checks(path: Path, names: list[str] | None = None) -> list[Finding]:
    """Run the named checks (all by default) on the tree at ``path``; return every finding."""
    tree = Tree(path)
    findings: list[Finding] = []
    for name in names or list(CHECKS):
        findings += CHECKS[name](tree)
    return findings
