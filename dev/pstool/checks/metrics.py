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
"""``metrics-registry``: every metric the series emits is in the registry. See ``pstool.checks``."""

from __future__ import annotations

import re

from pstool.checks.base import METRICS_REGISTRY, Finding, Tree

STATS_METHODS = ("incr", "decr", "gauge", "timing", "timer")


# --- metrics-registry ---------------------------------------------------------------------------


def _registry_patterns(text: str | None) -> list[re.Pattern[str]]:
    names = re.findall(r'^\s*-\s*name:\s*"([^"]+)"', text or "", flags=re.MULTILINE)
    return [re.compile("^" + re.sub(r"\\\{[^}]*\\\}", ".+", re.escape(n)) + "$") for n in names]


_METHODS = "|".join(STATS_METHODS)
_STATS_CALL = re.compile(rf"\b[Ss]tats\.(?:{_METHODS})\(\s*(f?)([\"'])(.+?)\2")
_DIRECT_IMPORT = re.compile(rf"from\s+\S*observability\.metrics\.stats\s+import\s+.*\b(?:{_METHODS})\b")


def check_metrics_registry(tree: Tree) -> list[Finding]:
    registry = _registry_patterns(tree.show("HEAD", METRICS_REGISTRY))
    findings = []
    for path in sorted(tree.changed_paths()):
        if not path.endswith(".py") or "/tests/" in path or path.startswith(("tests/", "devel-common/")):
            continue
        for line in tree.added_lines(path):
            if _DIRECT_IMPORT.search(line):
                findings.append(Finding("metrics-registry", path, f"imports a stats function directly: {line.strip()}"))
            for is_f, _, metric in _STATS_CALL.findall(line):
                probe = re.sub(r"\{[^}]*\}", "x", metric) if is_f else metric
                if not any(p.match(probe) for p in registry):
                    findings.append(Finding("metrics-registry", path, f"metric {metric!r} is not in {METRICS_REGISTRY}"))
    return findings
