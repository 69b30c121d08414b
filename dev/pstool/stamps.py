"""Passed results of ``verify``'s slow, deterministic checks, kept by the machine for every checkout.

Three of ``verify``'s checks run tools whose output depends only on what they read: the generators
on each feature's selection (``generated.check_generated_from_source``), the generators on the full
series (``generated.check_generated``) and the UI lint (``ui.lint``). Each takes 30 to 70 seconds of
CPU per line, and every fresh clone (each CI line's) ran them again on the same content.

A passed check is recorded as a stamp in :func:`pstool.paths.machine_cache_dir` (``checks/``), named
by the check and a key over everything it reads:

- the content it checks, given by the caller: git tree ids or patch ids, so a change to any file of
  the checked tree, a generated file included, is another key;
- the environment that runs it (:func:`environment_key`): the line's lock (pins, tools and their
  hashes), its constraints, the test requirements, the Python, the ``pstool`` modules that run the
  checks (:data:`CHECK_MODULES`) and the generator scripts and settings. The code that made the
  checked tree (applying the series) is not among them: the tree's ids are.

A failed check writes nothing, so it fails again in every checkout until its input changes. A stamp
is written whole (renamed into place), so a killed run never leaves a half one. ``PATCHSET_RECHECK=1``
(``pstool verify --recheck``) ignores the stamps and runs every check; a passed check then stamps
again.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from pstool.paths import CURRENT, LOCK_FILE, ROOT, TEST_REQUIREMENTS, machine_cache_dir

PSTOOL_DIR = Path(__file__).resolve().parent
#: The modules whose code runs the stamped checks: the generators and their comparison, the UI's
#: codegen and lint, the UI's paths, and this one.
CHECK_MODULES = ("generated.py", "ui.py", "layout.py", "stamps.py")
GENERATOR_FILES = ("generate_rest_api_spec.py", "dump_supervisor_schemas.py")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def environment_key() -> str:
    """What runs the checks, besides the content they check (see the module's docstring)."""
    files = [LOCK_FILE, CURRENT.constraints, TEST_REQUIREMENTS, *(PSTOOL_DIR / name for name in CHECK_MODULES)]
    files += [ROOT / "dev" / name for name in GENERATOR_FILES]
    files += sorted(p for p in (ROOT / "dev" / "generator-root").rglob("*") if p.is_file())
    parts = [CURRENT.line, sys.version, *(f"{p.parent.name}/{p.name}:{_digest(p)}" for p in files)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def key(*content: str) -> str:
    """The stamp key of a check of ``content`` (tree ids, patch ids, settings) in this environment."""
    return hashlib.sha256("\n".join([environment_key(), *content]).encode()).hexdigest()[:20]


def stamp_path(check: str, stamp_key: str) -> Path:
    return machine_cache_dir() / "checks" / f"{check}-{stamp_key}"


def rechecking() -> bool:
    """True when ``PATCHSET_RECHECK`` asks for every check to run whatever the stamps say."""
    return os.environ.get("PATCHSET_RECHECK", "").lower() not in ("", "0", "false", "no")


def passed(check: str, stamp_key: str) -> bool:
    """Whether ``check`` already passed on this machine for this key (never while rechecking)."""
    return not rechecking() and stamp_path(check, stamp_key).is_file()


def record(check: str, stamp_key: str, what: str) -> None:
    """Stamp ``check`` as passed for ``stamp_key``; ``what`` says what passed, for a reader of the cache."""
    path = stamp_path(check, stamp_key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"check": check, "key": stamp_key, "line": CURRENT.line, "what": what}) + "\n")
    tmp.replace(path)
