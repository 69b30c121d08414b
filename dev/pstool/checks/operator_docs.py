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
"""``operator-docs``: every option and metric the series adds is in the operator documents. See ``pstool.checks``."""

from __future__ import annotations

import re
from pathlib import Path

from pstool.checks.base import CONFIG_YML, METRICS_REGISTRY, Finding, Tree
from pstool.checks.config import _config_options

# --- operator-docs ------------------------------------------------------------------------------

OPERATOR_GUIDE = "docs/operations.md"
STATSD_MAPPINGS = "monitoring/statsd-mappings.yml"
HELM_VALUES = "monitoring/helm-values.yaml"
STATSD_PREFIX = "airflow"


def _registry_entries(text: str | None) -> dict[str, str | None]:
    """{metric name: its legacy name, or None} of the registry (``legacy_name: "-"`` is none)."""
    entries: dict[str, str | None] = {}
    current = None
    for line in (text or "").splitlines():
        if m := re.match(r'^\s*-\s*name:\s*"([^"]+)"', line):
            current = m.group(1)
            entries[current] = None
        elif current and (m := re.match(r'^\s+legacy_name:\s*"([^"]+)"', line)):
            entries[current] = None if m.group(1) in ("-", current) else m.group(1)
    return entries


def new_config_options(tree: Tree) -> list[tuple[str, str]]:
    """(section, option) of every ``config.yml`` option the series adds, in order."""
    before = _config_options(tree.show(tree.base_ref, CONFIG_YML))
    return sorted(key for key in _config_options(tree.show("HEAD", CONFIG_YML)) if key not in before)


def new_metrics(tree: Tree) -> dict[str, str | None]:
    """{name: legacy name or None} of every metric the series adds to the metrics registry."""
    before = _registry_entries(tree.show(tree.base_ref, METRICS_REGISTRY))
    after = _registry_entries(tree.show("HEAD", METRICS_REGISTRY))
    return {name: after[name] for name in sorted(after) if name not in before}


def _mentions(text: str, name: str) -> bool:
    """``name`` appears in ``text`` as a whole name (not inside a longer option or metric name)."""
    return re.search(rf"(?<![\w.]){re.escape(name)}(?![\w]|\.\w)", text) is not None


def _helm_config_options(text: str) -> set[tuple[str, str]]:
    """(section, option) under the Helm values' top-level ``config:`` (two-space indents)."""
    found: set[tuple[str, str]] = set()
    in_config, section = False, None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        key = line.strip().split(":", 1)[0].strip().strip("\"'")
        if indent == 0:
            in_config, section = key == "config", None
        elif in_config and indent == 2:
            section = key
        elif in_config and indent == 4 and section:
            found.add((section, key))
    return found


def _statsd_patterns(text: str) -> list[re.Pattern[str]]:
    """The ``match:`` globs of statsd_exporter mappings (``*`` is one dot-free component)."""
    globs = re.findall(r"^\s*-?\s*match:\s*[\"']?([^\"'\s#]+)", text, flags=re.MULTILINE)
    return [re.compile("^" + re.escape(g).replace(r"\*", r"[^.]+") + "$") for g in globs]


def _read(root: Path, name: str) -> str | None:
    path = root / name
    return path.read_text() if path.is_file() else None


def check_operator_docs(tree: Tree, docs_root: Path | None = None) -> list[Finding]:
    from pstool.paths import DOCS_ROOT

    root = docs_root or DOCS_ROOT
    name = "operator-docs"
    options, metrics = new_config_options(tree), new_metrics(tree)
    if not options and not metrics:
        return []
    guide, mappings, helm = (_read(root, f) for f in (OPERATOR_GUIDE, STATSD_MAPPINGS, HELM_VALUES))
    findings = [
        Finding(name, f, "is missing (the series adds options or metrics it must document)")
        for f, text in ((OPERATOR_GUIDE, guide), (STATSD_MAPPINGS, mappings), (HELM_VALUES, helm))
        if text is None and (metrics or f != STATSD_MAPPINGS) and (options or f != HELM_VALUES)
    ]
    helm_options = _helm_config_options(helm or "")
    for section, option in options:
        what = f"option [{section}] {option}"
        if guide is not None and not _mentions(guide, option):
            findings.append(Finding(name, OPERATOR_GUIDE, f"{what} (added to {CONFIG_YML}) is not in {OPERATOR_GUIDE}"))
        if helm is not None and (section, option) not in helm_options:
            findings.append(
                Finding(name, HELM_VALUES, f"{what} (added to {CONFIG_YML}) is not in {HELM_VALUES} (config: {section}: {option}:)")
            )
    patterns = _statsd_patterns(mappings or "")
    for metric, legacy in metrics.items():
        what = f"metric {metric}"
        if guide is not None and not _mentions(guide, metric):
            findings.append(Finding(name, OPERATOR_GUIDE, f"{what} (added to the metrics registry) is not in {OPERATOR_GUIDE}"))
        # Airflow sends the name, and the legacy name too while [metrics] legacy_names_on holds: both are mapped.
        for sent, kind in ((metric, "name"), (legacy, "legacy name")):
            if sent is None or mappings is None:
                continue
            probe = f"{STATSD_PREFIX}." + re.sub(r"\{[^}]*\}", "x", sent)
            if not any(p.match(probe) for p in patterns):
                findings.append(
                    Finding(name, STATSD_MAPPINGS, f"{what} (added to the metrics registry): its {kind} {sent} has no "
                            f"mapping in {STATSD_MAPPINGS} (nothing matches {probe})")
                )
    return findings
