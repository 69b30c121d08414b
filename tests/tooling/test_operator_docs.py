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
"""``make verify`` fails when the series adds a ``config.yml`` option or a registry metric that the
operator documents do not carry (issue 38, "make it mechanical"): the operator guide
(``docs/operations.md``) names both, the Helm values (``monitoring/helm-values.yaml``) set each option,
the StatsD mappings (``monitoring/statsd-mappings.yml``) map each metric (its name and its legacy name).

Each test commits one option and one metric on a pristine tree (real git, the real pinned upstream
files) and runs the real ``pstool check --only operator-docs`` (and once ``pstool verify``) against
copies of the repository's documents (``PATCHSET_DOCS_ROOT``); the repository's own are never edited.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.line_independent  # pstool itself, on the default line's pristine base

REPO = Path(__file__).resolve().parents[2]
CORE = "airflow-core/src/airflow"
REGISTRY = "shared/observability/src/airflow_shared/observability/metrics/metrics_template.yaml"
DOCS = ("docs/operations.md", "monitoring/statsd-mappings.yml", "monitoring/helm-values.yaml")
OPTION = "probe_doc_retries"
METRIC = "ti.probe_doc.counted"
LEGACY = "ti.probe_doc.counted.{dag_id}"


@pytest.fixture
def documented(pstool: Any, tmp_path: Path) -> Any:
    """A pristine tree with one commit adding ``[core] probe_doc_retries`` and ``ti.probe_doc.counted``,
    and copies of the operator documents that do not mention either."""
    pstool.run("checkout")
    pstool.commit(
        f"{CORE}/config_templates/config.yml",
        lambda t: t.replace(
            "    default_task_retries:\n",
            f"    {OPTION}:\n      description: |\n        A probe.\n      version_added: 3.3.2\n      type: integer\n"
            '      example: "2"\n      default: "0"\n    default_task_retries:\n',
            1,
        ),
        "Add an option",
        "t",
    )
    pstool.commit(
        REGISTRY,
        lambda t: t.replace(
            '  - name: "ti.finish"\n',
            f'  - name: "{METRIC}"\n    description: "A probe."\n    type: "counter"\n'
            f'    legacy_name: "{LEGACY}"\n    name_variables: ["dag_id"]\n\n  - name: "ti.finish"\n',
            1,
        ),
        "Add a metric",
        "t",
    )
    docs = tmp_path / "docs-root"
    for name in DOCS:
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, docs / name)
        assert OPTION not in (docs / name).read_text() and "probe_doc" not in (docs / name).read_text()
    pstool.extra_env["PATCHSET_DOCS_ROOT"] = str(docs)
    pstool.docs = docs
    return pstool


def check(pstool: Any) -> tuple[int, str]:
    proc = pstool.run("check", "--tree", str(pstool.tree), "--only", "operator-docs", check=False)
    return proc.returncode, proc.stdout + proc.stderr


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def document_option(docs: Path) -> None:
    append(docs / "docs/operations.md", f"\n| `[core] {OPTION}` | `0` | scheduler | a probe |\n")
    helm = docs / "monitoring/helm-values.yaml"
    text = helm.read_text()
    # Under the `core:` key of `config:` (comment lines may stand between the two).
    at = text.index("\n  core:\n", text.index("\nconfig:\n")) + len("\n  core:\n")
    helm.write_text(text[:at] + f'    {OPTION}: "0"\n' + text[at:])


def document_metric(docs: Path, *, legacy: bool = True) -> None:
    append(docs / "docs/operations.md", f"\nThe metric `{METRIC}` counts probes.\n")
    mappings = f'  - match: "airflow.{METRIC}"\n    name: "airflow_ti_probe_doc_counted_total"\n'
    if legacy:
        mappings += '  - match: "airflow.ti.probe_doc.counted.*"\n    name: "airflow_ti_probe_doc_counted_total"\n'
    append(docs / "monitoring/statsd-mappings.yml", mappings)


def test_an_undocumented_option_and_metric_fail_naming_each_file(documented: Any) -> None:
    rc, output = check(documented)
    assert rc == 1, output
    found = [line for line in output.splitlines() if line.startswith("[operator-docs]")]
    assert len(found) == 5, output
    assert f"[operator-docs] docs/operations.md: option [core] {OPTION}" in output
    assert f"[operator-docs] monitoring/helm-values.yaml: option [core] {OPTION}" in output
    assert f"[operator-docs] docs/operations.md: metric {METRIC}" in output
    assert f"[operator-docs] monitoring/statsd-mappings.yml: metric {METRIC} (added to the metrics registry): its name {METRIC}" in output
    assert f"its legacy name {LEGACY} has no mapping" in output
    # A metric needs no Helm value, an option no StatsD mapping.
    assert not any(METRIC in line and "helm-values" in line for line in found)
    assert not any(OPTION in line and "statsd-mappings" in line for line in found)


def test_documented_they_pass(documented: Any) -> None:
    document_option(documented.docs)
    document_metric(documented.docs)
    rc, output = check(documented)
    assert rc == 0, output
    assert "0 finding(s)" in output


def test_each_document_is_checked_on_its_own(documented: Any) -> None:
    document_option(documented.docs)
    document_metric(documented.docs, legacy=False)
    rc, output = check(documented)
    assert rc == 1 and output.count("[operator-docs]") == 1, output
    assert f"its legacy name {LEGACY} has no mapping in monitoring/statsd-mappings.yml" in output


def test_a_longer_name_does_not_document_a_shorter_one(documented: Any) -> None:
    document_metric(documented.docs)
    guide = documented.docs / "docs/operations.md"
    append(guide, f"\n`[core] {OPTION}_max` is another option; `{METRIC}` is there.\n")
    rc, output = check(documented)
    assert rc == 1, output
    assert f"docs/operations.md: option [core] {OPTION} (added" in output


def test_verify_fails_on_an_undocumented_option(documented: Any) -> None:
    document_metric(documented.docs)
    documented.run("export")
    proc = documented.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "upstream's review checks fail on the whole series" in proc.stderr
    assert f"[operator-docs] docs/operations.md: option [core] {OPTION}" in proc.stderr
    assert f"[operator-docs] monitoring/helm-values.yaml: option [core] {OPTION}" in proc.stderr
