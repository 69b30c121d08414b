"""Locations used by the tool, all relative to the repository root.

The repository carries one patch set per upstream release line. ``PATCHSET_LINE`` (the Makefile's
``LINE``) selects one; unset means the deployable line, :data:`DEFAULT_LINE`, whose files keep their
historical places (``upstream.lock``, ``patches/``, ``build/``, ``.venv``, ``dist/``). Every other
line ``X`` lives under ``lines/X/`` (its ``upstream.lock`` and ``patches/``) and builds into
``build/X/``, ``.venv-X`` and ``dist/X/``. Downloads are shared: files are named by version.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_LINE = "3.3"
LINES_DIR = ROOT / "lines"


def known_lines() -> list[str]:
    """The default line and every ``lines/X`` that holds an ``upstream.lock``."""
    others = sorted(p.name for p in LINES_DIR.iterdir() if (p / "upstream.lock").is_file()) if LINES_DIR.is_dir() else []
    return [DEFAULT_LINE, *others]


def current_line() -> str:
    """The selected line; an unknown one is a clear error naming the known ones."""
    line = os.environ.get("PATCHSET_LINE") or DEFAULT_LINE
    if line not in known_lines():
        raise SystemExit(
            f"pstool: unknown release line {line!r} (PATCHSET_LINE / make LINE=); "
            f"this repository carries: {', '.join(known_lines())}"
        )
    return line


LINE = current_line()
_DEFAULT = LINE == DEFAULT_LINE
LINE_DIR = ROOT if _DEFAULT else LINES_DIR / LINE
LOCK_FILE = LINE_DIR / "upstream.lock"
PATCHES_DIR = Path(os.environ.get("PATCHSET_PATCHES", LINE_DIR / "patches"))
SERIES_FILE = PATCHES_DIR / "series"
BUILD_DIR = ROOT / "build" if _DEFAULT else ROOT / "build" / LINE
DIST_DIR = ROOT / "dist" if _DEFAULT else ROOT / "dist" / LINE


def cache_dir() -> Path:
    """Where pinned upstream files are downloaded to (``PATCHSET_CACHE`` overrides)."""
    return Path(os.environ.get("PATCHSET_CACHE", ROOT / ".cache" / "upstream"))


def tree_dir() -> Path:
    """The materialized upstream tree (``PATCHSET_TREE`` overrides, e.g. for a second worktree)."""
    return Path(os.environ.get("PATCHSET_TREE", BUILD_DIR / "tree"))


def venv_dir() -> Path:
    """The project virtualenv with the patched wheels (``PATCHSET_VENV`` overrides)."""
    default = ROOT / ".venv" if _DEFAULT else ROOT / f".venv-{LINE}"
    return Path(os.environ.get("PATCHSET_VENV", default))
