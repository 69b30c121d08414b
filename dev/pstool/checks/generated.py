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
"""``generated-in-patch``: a patch that changes a generated file's models regenerates it itself. See ``pstool.checks``."""

from __future__ import annotations

import ast
import re

from pstool.checks.base import (
    CORE,
    EXEC_API,
    SUPERVISOR_SCHEMA,
    Finding,
    Tree,
    _schema_definitions,
)
from pstool.git import out

# --- generated-in-patch --------------------------------------------------------------------------

SDK_MODELS = "task-sdk/src/airflow/sdk/api/datamodels/_generated.py"
REST_SPECS = (
    f"{CORE}/api_fastapi/core_api/openapi/v2-rest-api-generated.yaml",
    f"{CORE}/api_fastapi/core_api/openapi/_private_ui.yaml",
)
# generated file -> the source files whose models it is generated from
GENERATED_FROM: dict[str, tuple[str, ...]] = {
    SUPERVISOR_SCHEMA: (
        "task-sdk/src/airflow/sdk/execution_time/comms.py",
        f"{CORE}/callbacks/callback_requests.py",
        SDK_MODELS,
    ),
    SDK_MODELS: (f"{EXEC_API}/datamodels/",),
    REST_SPECS[0]: (f"{CORE}/api_fastapi/core_api/datamodels/",),
    REST_SPECS[1]: (f"{CORE}/api_fastapi/core_api/datamodels/",),
}


def _generated_model_names(path: str, text: str | None) -> set[str]:
    """The model names a generated file holds."""
    if not text:
        return set()
    if path.endswith(".json"):
        return set(_schema_definitions(text))
    if path.endswith(".py"):
        return {n.name for n in ast.parse(text).body if isinstance(n, ast.ClassDef)}
    names, in_schemas = set(), False
    for line in text.splitlines():  # components: / schemas: / <Name>: at four spaces
        if line.startswith("  schemas:"):
            in_schemas = True
        elif in_schemas and re.match(r"^  \S", line):
            in_schemas = False
        elif in_schemas and (m := re.match(r"^    ([A-Za-z_][A-Za-z0-9_]*):\s*$", line)):
            names.add(m.group(1))
    return names


def _field_lines(source: str | None) -> dict[str, set[int]]:
    """{class name: line numbers of its field declarations (annotated assignments, model_config)}."""
    result: dict[str, set[int]] = {}
    if not source:
        return result
    try:
        module = ast.parse(source)
    except SyntaxError:
        return result
    for node in ast.walk(module):
        if isinstance(node, ast.ClassDef):
            lines: set[int] = set()
            for stmt in node.body:
                is_config = isinstance(stmt, ast.Assign) and any(getattr(t, "id", "") == "model_config" for t in stmt.targets)
                if isinstance(stmt, ast.AnnAssign) or is_config:
                    lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
            result[node.name] = lines
    return result


def _changed_lines(tree: Tree, sha: str, path: str) -> tuple[set[int], set[int]]:
    """(old line numbers removed, new line numbers added) by ``sha`` in ``path``."""
    diff = out(tree.path, "diff", "--no-renames", "-U0", f"{sha}^", sha, "--", path)
    old: set[int] = set()
    new: set[int] = set()
    for m in re.finditer(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", diff, flags=re.MULTILINE):
        o, oc, n, nc = int(m.group(1)), int(m.group(2) or 1), int(m.group(3)), int(m.group(4) or 1)
        old.update(range(o, o + oc))
        new.update(range(n, n + nc))
    return old, new


def _changed_models(tree: Tree, sha: str, path: str) -> set[str]:
    """Classes of ``path`` whose field declarations ``sha`` adds, removes or edits."""
    old_lines, new_lines = _changed_lines(tree, sha, path)
    changed = set()
    for rev, lines in ((f"{sha}^", old_lines), (sha, new_lines)):
        for cls, field_lines in _field_lines(tree.show(rev, path)).items():
            if field_lines & lines:
                changed.add(cls)
    return changed


def check_generated_in_patch(tree: Tree) -> list[Finding]:
    findings = []
    for commit in tree.commits():
        for generated, sources in GENERATED_FROM.items():
            if generated in commit.changes:
                continue
            touched = sorted(
                p for p in commit.changes
                if p.endswith(".py") and commit.changes[p] != "D" and any(p == s or (s.endswith("/") and p.startswith(s)) for s in sources)
            )
            if not touched:
                continue
            held = _generated_model_names(generated, tree.show(commit.sha, generated))
            models = sorted({m for p in touched for m in _changed_models(tree, commit.sha, p)} & held)
            if models:
                findings.append(
                    Finding("generated-in-patch", commit.subject, f"changes {', '.join(models)}, which {generated} holds, "
                            "but does not regenerate it (run `pstool regenerate --tree` and commit it with this change)")
                )
    return findings
