"""Locations used by the tool, all relative to the repository root."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK_FILE = ROOT / "upstream.lock"
PATCHES_DIR = Path(os.environ.get("PATCHSET_PATCHES", ROOT / "patches"))
SERIES_FILE = PATCHES_DIR / "series"
BUILD_DIR = ROOT / "build"
DIST_DIR = ROOT / "dist"


def cache_dir() -> Path:
    """Where pinned upstream files are downloaded to (``PATCHSET_CACHE`` overrides)."""
    return Path(os.environ.get("PATCHSET_CACHE", ROOT / ".cache" / "upstream"))


def tree_dir() -> Path:
    """The materialized upstream tree (``PATCHSET_TREE`` overrides, e.g. for a second worktree)."""
    return Path(os.environ.get("PATCHSET_TREE", BUILD_DIR / "tree"))


def venv_dir() -> Path:
    """The project virtualenv with the patched wheels (``PATCHSET_VENV`` overrides)."""
    return Path(os.environ.get("PATCHSET_VENV", ROOT / ".venv"))
