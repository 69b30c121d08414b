"""Create or refresh the project virtualenv with the patched wheels and the test dependencies.

Idempotent: a stamp in the venv records the hashes of everything installed; when nothing
changed, ``install`` returns at once. When only the patched wheels changed, only they are
reinstalled.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from pstool import PatchsetError
from pstool.build import build, dist_dir
from pstool.lock import fetch, load_lock, sha256_of
from pstool.paths import CURRENT, PATCHES_DIR, TEST_REQUIREMENTS, tree_dir, venv_dir

REQUIREMENTS = TEST_REQUIREMENTS
# Each line pins its own third-party set (lines/<line>/constraints.txt).
CONSTRAINTS = CURRENT.constraints
STAMP = ".patchset-stamp.json"


def _pip(venv: Path, *args: str) -> None:
    cmd = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PatchsetError(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def ensure_tree(tree: Path | None) -> Path:
    """The tree to build from: the given one, or build/<line>/tree, checked out if missing.

    The tree must match the line's patches/ exactly, so that an unexported edit is never silently lost
    or silently shipped.
    """
    from pstool.tree import checkout, export

    if tree is not None:
        return tree
    tree = tree_dir()
    if not (tree / ".git").exists():
        return checkout(tree, quiet=True)
    changed = export(tree, check=True, patches_dir=PATCHES_DIR)
    if changed:
        raise PatchsetError(
            f"{tree} and patches/ disagree ({', '.join(changed[:5])}). "
            "Run `make export` to keep the tree's commits, or `make checkout` to discard them."
        )
    return tree


def install(tree: Path | None = None) -> Path:
    lock = load_lock()
    files = fetch(lock, quiet=True)
    tree = ensure_tree(tree)
    built = build(tree, lock, dist_dir())
    patched = {p.name.split("-")[0].replace("_", "-") for p in built}
    unpatched = [files[w.file] for w in lock.wheels if w.name not in patched]
    venv = venv_dir()
    wanted = {
        "python": sys.version.split()[0],
        "patched": {p.name: sha256_of(p) for p in built},
        "unpatched": sorted(p.name for p in unpatched),
        "requirements": hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest(),
        "constraints": hashlib.sha256(CONSTRAINTS.read_bytes()).hexdigest() if CONSTRAINTS.exists() else "",
    }
    stamp_path = venv / STAMP
    current = json.loads(stamp_path.read_text()) if stamp_path.exists() else {}
    if current == wanted:
        print(f"{venv}: up to date")
        return venv
    created = not (venv / "bin" / "python").exists()
    if created:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        current = {}
    constraint_args = ["-c", str(CONSTRAINTS)] if CONSTRAINTS.exists() else []
    if {k: v for k, v in current.items() if k != "patched"} != {k: v for k, v in wanted.items() if k != "patched"}:
        _pip(venv, "install", "--quiet", *constraint_args, *map(str, built), *map(str, unpatched), "-r", str(REQUIREMENTS))
    # Force the patched wheels into a venv that held an earlier build: same version string, different
    # bytes after an edit, which pip would call "already satisfied". A venv created just now got them
    # from the install above.
    if built and not created:
        _pip(venv, "install", "--quiet", "--no-deps", "--force-reinstall", *map(str, built))
    _pip(venv, "check")
    stamp_path.write_text(json.dumps(wanted, indent=2, sort_keys=True))
    print(f"{venv}: installed {', '.join(p.name for p in built) or 'no patched wheels'}")
    return venv
