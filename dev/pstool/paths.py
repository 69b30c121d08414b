"""Locations used by the tool, all relative to the repository root.

The repository carries one patch set per upstream release line, each under ``lines/<line>/``:
its ``upstream.lock``, ``constraints.txt``, ``line.toml`` and ``patches/`` (with the ``series``).
Every line builds into ``build/<line>/`` (tree, caches, upstream exports) and ``dist/<line>/``.
``PATCHSET_LINE`` (the Makefile's ``LINE``) selects one; unset means :data:`DEFAULT_LINE`, which
is the only thing that line has that the others don't. The one exception to the symmetry is the
venv: ``.venv`` is the default line's and ``.venv-<line>`` every other line's, as the README's
commands use them. Downloads (``.cache/upstream``) are shared: files are named by version.

:func:`for_line` gives any line's locations; the module constants are the selected line's, read once
per process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The line a bare ``make ...`` selects (the deployable one). The Makefile's ``LINE ?=`` agrees
#: (tests/tooling/test_lines.py checks it).
DEFAULT_LINE = "3.3"
LINES_DIR = Path(os.environ.get("PATCHSET_LINES", ROOT / "lines"))
#: Where every line builds (``PATCHSET_BUILD`` overrides, e.g. for the port command's tests).
BUILD_ROOT = Path(os.environ.get("PATCHSET_BUILD", ROOT / "build"))
#: Which features' patches twin across lines since their last port (pstool.twins).
TWINS_FILE = LINES_DIR / "twins.toml"
#: The edits a pull request needs on an upstream checkout that the pinned release's sources cannot
#: carry (a new docs page's toctree entry, tests that belong in an existing upstream test module);
#: ``pstool export-upstream`` writes them into the cover letter (``PATCHSET_UPSTREAM_EDITS`` overrides).
UPSTREAM_EDITS_FILE = Path(os.environ.get("PATCHSET_UPSTREAM_EDITS", LINES_DIR / "upstream-edits.toml"))
#: Where the operator documents live (``docs/operations.md``, ``monitoring/``): the repository root
#: (``PATCHSET_DOCS_ROOT`` overrides, for the operator-docs check's tests).
DOCS_ROOT = Path(os.environ.get("PATCHSET_DOCS_ROOT", ROOT))
#: The test dependencies every line's venv gets (``pstool.venv``).
TEST_REQUIREMENTS = ROOT / "dev" / "requirements-test.txt"


def known_lines() -> list[str]:
    """Every ``lines/X`` that holds an ``upstream.lock``, oldest release first."""
    if not LINES_DIR.is_dir():
        return []
    found = [p.name for p in LINES_DIR.iterdir() if (p / "upstream.lock").is_file()]
    return sorted(found, key=lambda name: tuple(int(x) if x.isdigit() else x for x in name.split(".")))


@dataclass(frozen=True)
class LinePaths:
    """Where one release line's inputs and outputs are."""

    line: str
    dir: Path  # lines/<line>
    lock_file: Path
    constraints: Path
    line_toml: Path
    patches_dir: Path
    build_dir: Path  # build/<line>
    dist_dir: Path  # dist/<line>
    venv: Path  # .venv (default line) or .venv-<line>

    @property
    def series_file(self) -> Path:
        return self.patches_dir / "series"

    @property
    def tree(self) -> Path:
        return self.build_dir / "tree"


def for_line(line: str) -> LinePaths:
    """The locations of ``line``; an unknown line is a clear error naming the known ones."""
    if line not in known_lines():
        raise SystemExit(
            f"pstool: unknown release line {line!r} (PATCHSET_LINE / make LINE=); "
            f"this repository carries: {', '.join(known_lines()) or 'none'} (under {LINES_DIR})"
        )
    directory = LINES_DIR / line
    return LinePaths(
        line=line,
        dir=directory,
        lock_file=directory / "upstream.lock",
        constraints=directory / "constraints.txt",
        line_toml=directory / "line.toml",
        patches_dir=directory / "patches",
        build_dir=BUILD_ROOT / line,
        dist_dir=ROOT / "dist" / line,
        venv=ROOT / ".venv" if line == DEFAULT_LINE else ROOT / f".venv-{line}",
    )


def current_line() -> str:
    """The selected line (``PATCHSET_LINE``, else :data:`DEFAULT_LINE`)."""
    return os.environ.get("PATCHSET_LINE") or DEFAULT_LINE


LINE = current_line()
CURRENT = for_line(LINE)
LINE_DIR = CURRENT.dir
LOCK_FILE = CURRENT.lock_file
PATCHES_DIR = Path(os.environ.get("PATCHSET_PATCHES", CURRENT.patches_dir))
SERIES_FILE = PATCHES_DIR / "series"
BUILD_DIR = CURRENT.build_dir
DIST_DIR = CURRENT.dist_dir


def cache_dir() -> Path:
    """Where pinned upstream files are downloaded to (``PATCHSET_CACHE`` overrides)."""
    return Path(os.environ.get("PATCHSET_CACHE", ROOT / ".cache" / "upstream"))


def machine_cache_dir() -> Path:
    """What this machine keeps for every checkout, outside any (``PATCHSET_MACHINE_CACHE`` overrides;
    else ``$XDG_CACHE_HOME/airflow-patchset``, ``~/.cache/airflow-patchset``): only what pinned upstream
    files alone determine, keyed by them (the unpatched venvs, :mod:`pstool.unpatched`; the stamp of a
    passed pristine-generators check, :func:`pstool.generated.check_pristine`), and the stamps of
    verify's passed deterministic checks, keyed by the content they checked (:mod:`pstool.stamps`)."""
    if os.environ.get("PATCHSET_MACHINE_CACHE"):
        return Path(os.environ["PATCHSET_MACHINE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "airflow-patchset"


def tree_dir() -> Path:
    """The materialized upstream tree (``PATCHSET_TREE`` overrides, e.g. for a second worktree)."""
    return Path(os.environ.get("PATCHSET_TREE", CURRENT.tree))


def venv_dir() -> Path:
    """The project virtualenv with the patched wheels (``PATCHSET_VENV`` overrides)."""
    return Path(os.environ.get("PATCHSET_VENV", CURRENT.venv))
