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
"""The commands the documents show for an upstream export, run as they are written.

Every ``make export-upstream ...`` and every ``git am`` of an export in a fenced shell block of the
README, CONTRIBUTING.md and ``docs/`` is taken from the text and run: the export on a throwaway
series of eleven patches (so that one is numbered ``0010``, which a glob such as
``0[0-9][0-9][1-9]-*.patch`` silently skips), the ``git am`` into a scratch clone at the pristine
base. Every patch of the export except the cover letter must become a commit, as
``dev/breeze/apply_series.py`` applies them. The throwaway series is built on the default line's
pristine base (the ``pstool`` fixture), so a command written for ``LINE=3.4`` runs with that line.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import SYSTEM_PYTHON

pytestmark = pytest.mark.line_independent  # pstool and git mechanics, on the default line's pristine base

REPO = Path(__file__).resolve().parents[2]
FEATURE = "bulk"
PATCHES = 11  # numbered 0001 to 0011: 0010 is the one a careless glob loses
STATE = "airflow-core/src/airflow/utils/state.py"
#: ``make export-upstream FEATURE=<f> [LINE=<line>]`` and the output path its comment names, if any.
EXPORT = re.compile(r"^make export-upstream FEATURE=(?P<feature>\S+)(?: LINE=(?P<line>\S+))?(?:\s+#\s*(?P<out>\S+))?")
#: A ``git am`` whose patches are read from an export directory ``.../upstream/<feature>/``.
GIT_AM = re.compile(r"\bgit am\b.*?(?P<dir>\S*/upstream/(?P<feature>[^/\s]+)/)")


def documents() -> list[Path]:
    docs = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [path for path in docs if path.is_file()]


def shell_commands(path: Path) -> list[str]:
    """The command lines of the fenced ``bash``/``sh``/``console`` blocks of ``path``."""
    commands: list[str] = []
    inside = False
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            inside = not inside and stripped[3:].strip() in ("bash", "sh", "shell", "console")
            continue
        if inside and stripped and not stripped.startswith("#"):
            commands.append(stripped.removeprefix("$ "))
    return commands


def documented(pattern: re.Pattern[str]) -> list[tuple[str, re.Match[str]]]:
    found = []
    for path in documents():
        for command in shell_commands(path):
            match = pattern.search(command)
            if match:
                found.append((f"{path.relative_to(REPO)}: {command}", match))
    return found


def test_the_documents_show_an_export_and_its_git_am() -> None:
    assert documented(EXPORT), "no `make export-upstream` command in the documents"
    assert documented(GIT_AM), "no `git am` of an export in the documents"


@pytest.mark.parametrize("where", [where for where, _ in documented(EXPORT)])
def test_an_export_command_names_the_directory_it_writes(where: str) -> None:
    from pstool.paths import DEFAULT_LINE, ROOT, for_line

    match = EXPORT.search(where.split(": ", 1)[1])
    assert match
    if match["out"]:
        line = match["line"] or DEFAULT_LINE
        written = (for_line(line).build_dir / "upstream" / match["feature"]).relative_to(ROOT).as_posix()
        assert match["out"].startswith(f"{written}/"), f"{where}: pstool writes {written}/"


@pytest.fixture
def exported(pstool: Any, tmp_path: Path) -> tuple[Any, dict[str, str], Path]:
    """(pstool, its environment with a private build directory, a series of PATCHES patches of FEATURE)."""
    pstool.run("checkout")
    for number in range(1, PATCHES + 1):
        pstool.commit(STATE, lambda text, n=number: f"{text}# bulk change {n}\n", f"Bulk change {number}", FEATURE)
    pstool.run("export")
    env = {**pstool.env, "PATCHSET_BUILD": str(tmp_path / "build")}  # never the checkout's build/
    return pstool, env, tmp_path / "build" / pstool.line / "upstream" / FEATURE


def run_documented_export(command: str, pstool: Any, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    match = EXPORT.search(command)
    assert match
    argv = ["make", "-s", "export-upstream", f"FEATURE={FEATURE}", f"LINE={pstool.line}"]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("where", [where for where, _ in documented(EXPORT)])
def test_each_export_command_writes_the_series(where: str, exported: tuple[Any, dict[str, str], Path]) -> None:
    pstool, env, series = exported
    proc = run_documented_export(where.split(": ", 1)[1], pstool, env)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in series.glob("*.patch"))
    assert names[0] == "0000-cover-letter.patch"
    assert len(names) == PATCHES + 1 and f"{PATCHES:04d}-bulk-change-{PATCHES}.patch" in names, names


@pytest.mark.parametrize("where", [where for where, _ in documented(GIT_AM)])
def test_each_git_am_command_applies_every_patch_of_the_export(
    where: str, exported: tuple[Any, dict[str, str], Path]
) -> None:
    pstool, env, series = exported
    proc = subprocess.run(
        [SYSTEM_PYTHON, "-m", "pstool", "export-upstream", FEATURE], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    patches = sorted(p.name for p in series.glob("[0-9][0-9][0-9][0-9]-*.patch") if not p.name.startswith("0000-"))
    assert len(patches) == PATCHES and any(name.startswith("0010-") for name in patches), patches

    scratch = pstool.root / "upstream-checkout"
    subprocess.run(["git", "clone", "-q", str(pstool.tree), str(scratch)], check=True)
    pstool.git("checkout", "-q", "-B", FEATURE, "refs/tags/upstream/3.3.2", cwd=scratch)
    base = pstool.git("rev-parse", "HEAD", cwd=scratch).strip()

    command = where.split(": ", 1)[1]
    match = GIT_AM.search(command)
    assert match
    command = command.replace(match["dir"], f"{series}/")
    git_env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@localhost",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@localhost",
    }
    am = subprocess.run(["bash", "-c", command], cwd=scratch, env=git_env, capture_output=True, text=True, check=False)
    assert am.returncode == 0, f"{where}\n{am.stdout}\n{am.stderr}"
    applied = pstool.git("log", "--format=%s", f"{base}..HEAD", cwd=scratch).splitlines()[::-1]
    assert applied == [f"Bulk change {n}" for n in range(1, PATCHES + 1)], f"{where}: applied {applied}"
