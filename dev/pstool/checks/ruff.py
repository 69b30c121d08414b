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
"""``ruff``: no new lint finding, added files ``ruff format``-clean (the venv's ruff). See ``pstool.checks``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from pstool.checks.base import Finding, Tree

# --- ruff -------------------------------------------------------------------------------------------

RUFF_CONFIG = Path(__file__).resolve().parents[2] / "generator-root" / "pyproject.toml"
# Rules whose result does not depend on upstream's per-directory settings (type-checking imports
# and docstring rules do: the pristine files would fail them here too).
RUFF_SELECT = "I,F,E,W,UP,G,LOG,ISC,ASYNC"
# Upstream's ignores among those (the command line's --select replaces the config's lists).
RUFF_IGNORE = "E501,ISC004,LOG004,W191,E111,E114,E117"
GENERATED_PY = ("task-sdk/src/airflow/sdk/api/datamodels/_generated.py",)


def _ruff() -> str | None:
    local = Path(sys.prefix) / "bin" / "ruff"
    for candidate in (os.environ.get("PSTOOL_RUFF"), str(local), shutil.which("ruff")):
        if candidate and Path(candidate).is_file():
            return candidate
    from pstool.paths import venv_dir

    venv = venv_dir() / "bin" / "ruff"
    return str(venv) if venv.is_file() else None


def _ruff_findings(ruff: str, root: Path) -> Counter[tuple[str, str, str]]:
    proc = subprocess.run(
        [ruff, "check", "--no-cache", "--config", str(RUFF_CONFIG), "--target-version", "py310",
         "--select", RUFF_SELECT, "--ignore", RUFF_IGNORE, "--output-format", "json", "--exit-zero", "."],
        cwd=root, capture_output=True, text=True, check=True,
    )
    return Counter(
        (Path(item["filename"]).resolve().relative_to(root.resolve()).as_posix(), item["code"] or "", item["message"])
        for item in json.loads(proc.stdout or "[]")
    )


def check_ruff(tree: Tree) -> list[Finding]:
    ruff = _ruff()
    if ruff is None:
        return [Finding("ruff", "tree", "ruff not found (install the venv: pstool install)")]
    changed = {
        path: status
        for path, status in tree.changed_paths().items()
        if path.endswith(".py") and status in "AM" and path not in GENERATED_PY
    }
    if not changed:
        return []
    findings = []
    with tempfile.TemporaryDirectory(prefix="pstool-ruff-") as tmp:
        before, after = Path(tmp) / "before", Path(tmp) / "after"
        for path, status in changed.items():
            for root, rev in ((after, "HEAD"), (before, tree.base_ref)):
                text = tree.show(rev, path)
                if text is None or (rev != "HEAD" and status == "A"):
                    continue
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_text(text)
        before.mkdir(exist_ok=True)
        new = _ruff_findings(ruff, after) - _ruff_findings(ruff, before)
        for (path, code, message), count in sorted(new.items()):
            findings.append(Finding("ruff", path, f"{code} {message}" + (f" (x{count})" if count > 1 else "")))
        added = [path for path, status in changed.items() if status == "A"]
        if added:
            proc = subprocess.run(
                [ruff, "format", "--no-cache", "--config", str(RUFF_CONFIG), "--check", "--output-format", "concise", *added],
                cwd=after, capture_output=True, text=True,
            )
            unformatted = {line.split(":", 1)[0] for line in proc.stdout.splitlines() if "would be reformatted" in line}
            for path in sorted(set(added) & unformatted):
                findings.append(Finding("ruff", path, "not ruff format-clean (ruff format would change it)"))
    return findings
