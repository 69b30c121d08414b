"""Fixtures for testing pstool itself: run it as a subprocess against throwaway series and trees.

The throwaway series are written against the default line's pristine base (tag ``upstream/3.3.2``,
wheels ``3.3.2+<label>``, the label of that line's lock), so the pstool these fixtures run is always the default line's, whichever
line's session runs the tests (``PATCHSET_LINE_INDEPENDENT_ON``): ``Pstool.line`` says so, and a test
that reads that line's pins in its own process takes them from ``Pstool.lock()``, never from the
session's line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = os.environ.get("PSTOOL_PYTHON", "python3")
if str(REPO / "dev") not in sys.path:
    sys.path.insert(0, str(REPO / "dev"))

from pstool.paths import DEFAULT_LINE, LINE, for_line  # noqa: E402


def _ruff_pin(line: str) -> str | None:
    for row in for_line(line).constraints.read_text().splitlines():
        if row.strip().lower().startswith("ruff=="):
            return row.strip().lower()
    return None


def session_ruff(line: str) -> str | None:
    """The ruff of this session's venv when it is the one ``line`` pins (both lines pin the same), else None.

    pstool's review checks run the venv's ruff, and the pstool subprocess's venv is ``line``'s
    (``.venv`` for the default line): a clone that built only another line's venv (CI runs some
    line-independent tests in the 3.4 line's clone) has none, while the same pinned ruff is here.
    """
    ruff = Path(sys.prefix) / "bin" / "ruff"
    session_line = LINE
    if ruff.is_file() and _ruff_pin(session_line) is not None and _ruff_pin(session_line) == _ruff_pin(line):
        return str(ruff)
    return None


class Pstool:
    """Runs ``python -m pstool`` on :attr:`line` with its own patches dir, tree, dist and cache paths."""

    #: The line whose pristine base and pins the pstool subprocess uses, set in its environment.
    line = DEFAULT_LINE

    def __init__(self, root: Path) -> None:
        self.root = root
        self.patches = root / "patches"
        self.tree = root / "build" / "tree"
        self.dist = root / "dist"
        self.patches.mkdir(parents=True, exist_ok=True)
        #: More environment for the pstool subprocess (e.g. ``PATCHSET_DOCS_ROOT``).
        self.extra_env: dict[str, str] = {}

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHSET_")}
        env.update(
            PYTHONPATH=str(REPO / "dev"),
            PATCHSET_LINE=self.line,
            PATCHSET_PATCHES=str(self.patches),
            PATCHSET_TREE=str(self.tree),
            PATCHSET_DIST=str(self.dist),
            PATCHSET_CACHE=str(REPO / ".cache" / "upstream"),
            # The throwaway series' own pull-request edits (none unless a test writes the file):
            # lines/upstream-edits.toml keys edits by the real series' patches, which this one lacks.
            PATCHSET_UPSTREAM_EDITS=str(self.root / "upstream-edits.toml"),
            # The throwaway series' own documents (none unless a test writes them): the repository's
            # AIP docs name tests of the real series' tree, and its pending process references its patches.
            PATCHSET_DOCS_ROOT=str(self.root),
        )
        ruff = session_ruff(self.line)
        if ruff:
            env["PSTOOL_RUFF"] = ruff
        env.update(self.extra_env)
        return env

    def lock(self) -> Any:
        """The pins of :attr:`line` (``pstool.lock.Lock``), as the pstool subprocess reads them."""
        from pstool.lock import load_lock

        return load_lock(for_line(self.line).lock_file)

    def label(self) -> str:
        """The local version label of :attr:`line` (``ps.N``), as the pstool subprocess gives its wheels."""
        from pstool.lock import local_version

        return local_version(for_line(self.line).lock_file)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [SYSTEM_PYTHON, "-m", "pstool", *args], env=self.env, capture_output=True, text=True, cwd=self.root
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"pstool {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def git(self, *args: str, cwd: Path | None = None) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
            cwd=cwd or self.tree,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def commit(self, path: str, transform, subject: str, feature: str, depends: str = "none") -> None:
        """Edit one file in the tree with ``transform(text) -> text`` and commit it with trailers."""
        target = self.tree / path
        target.write_text(transform(target.read_text()))
        self.git("add", path)
        message = f"{subject}\n\nWhy it matters.\n\nFeature: {feature}\nUpstream-Status: Pending (test)\nDepends: {depends}\n"
        self.git("commit", "-q", "-m", message)


@pytest.fixture
def pstool(tmp_path: Path) -> Pstool:
    return Pstool(tmp_path)


@pytest.fixture
def seeded(pstool: Pstool) -> Pstool:
    """A throwaway series of two features (beta depends on alpha), exported to patches/."""
    pstool.run("checkout")
    pstool.commit(
        "airflow-core/src/airflow/utils/state.py",
        lambda t: t.replace('    SCHEDULED = "scheduled"\n', '    SCHEDULED = "scheduled"\n    # alpha was here\n', 1),
        "Mark the callback states",
        "alpha",
    )
    pstool.commit(
        "shared/state/src/airflow_shared/state/__init__.py",
        lambda t: t + "\n\nBETA_MARKER = 1\n",
        "Add a marker to the shared state library",
        "beta",
        depends="alpha",
    )
    pstool.run("export")
    return pstool
