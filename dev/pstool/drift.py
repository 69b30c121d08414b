"""``pstool drift VERSION``: how the series fares against a newer upstream release.

The newer apache-airflow-core (and the task-sdk it pins) is laid out in the same monorepo
layout as a commit on top of the pinned base; then each patch, in series order, is classified:

- ``already upstream``: it reverse-applies to the newer tree (it is skipped);
- ``clean``: it applies strictly (no offset, no fuzz);
- ``clean (offset)``: it applies, but only with an offset: context moved;
- ``needs 3-way``: it applies only with ``git am -3``;
- ``conflicts``: it does not apply; later patches are still tried.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pstool import PatchsetError
from pstool.git import git
from pstool.layout import CORE, SDK
from pstool.lock import PinnedFile, load_lock
from pstool.series import add_trailer, full_selection, load_series
from pstool.tree import populate_pristine, scratch_tree


def _download(requirement: str, dest: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q", "-d", str(dest), requirement],
        check=False,
        capture_output=True,
    )
    name, version = requirement.split("==")
    found = list(dest.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if not found:
        raise PatchsetError(f"could not download {requirement}")
    return found[0]


def _find(directory: Path, dist: str, version: str | None = None) -> Path:
    pattern = f"{dist.replace('-', '_')}-{version or '*'}-*.whl"
    found = sorted(directory.glob(pattern))
    if not found:
        raise PatchsetError(f"no wheel matching {pattern} in {directory}")
    return found[-1]


def _sdk_requirement(core_wheel: Path) -> str:
    with zipfile.ZipFile(core_wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    match = re.search(r"^Requires-Dist: apache-airflow-task-sdk\s*[=<>~!]*=\s*([0-9][^,;\s]*)", text, re.M)
    if not match:
        raise PatchsetError(f"{core_wheel.name} does not pin apache-airflow-task-sdk")
    return match.group(1)


def newer_layout(version: str, from_dir: Path | None, dest: Path) -> None:
    """Lay the newer core + task-sdk (and the pinned providers) out in ``dest``."""
    lock = load_lock()
    files: dict[str, Path] = {}
    work = Path(tempfile.mkdtemp(prefix="pstool-drift-dl-"))
    core = _find(from_dir, CORE, version) if from_dir else _download(f"{CORE}=={version}", work)
    sdk_version = _sdk_requirement(core)
    sdk = _find(from_dir, SDK, sdk_version) if from_dir else _download(f"{SDK}=={sdk_version}", work)
    wheels = []
    from pstool.lock import fetch

    pinned_files = fetch(lock, quiet=True)
    for pinned in lock.wheels:
        if pinned.name == CORE:
            wheels.append(PinnedFile(CORE, version, core.name, "", "wheel"))
            files[core.name] = core
        elif pinned.name == SDK:
            wheels.append(PinnedFile(SDK, sdk_version, sdk.name, "", "wheel"))
            files[sdk.name] = sdk
        else:
            wheels.append(pinned)
            files[pinned.file] = pinned_files[pinned.file]
    for source in lock.sources:
        files[source.file] = pinned_files[source.file]
    newer = type(lock)(version, "", tuple(wheels), lock.sources)
    populate_pristine(dest, newer, files)


def drift(version: str, from_dir: Path | None = None) -> int:
    patches = full_selection(load_series())  # the full series, integration patches included
    tree = scratch_tree()
    try:
        for child in tree.iterdir():
            if child.name != ".git":
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        newer_layout(version, from_dir, tree)
        git(tree, "add", "-A")
        git(tree, "commit", "-q", "--allow-empty", "-m", f"Apache Airflow {version} (newer upstream)")
        results = []
        for patch in patches:
            data = add_trailer(patch.body, "Patch-Filename", patch.name)
            if git(tree, "apply", "--check", "-R", "-", input=data, check=False).returncode == 0:
                results.append((patch.name, "already upstream"))
                continue
            check = git(tree, "apply", "--check", "-v", "-", input=data, check=False)
            report = check.stderr.decode(errors="replace")
            if check.returncode == 0:
                git(tree, "am", "--keep-cr", "--no-3way", input=data)
                results.append((patch.name, "clean (offset)" if "offset" in report else "clean"))
                continue
            three = git(tree, "am", "--keep-cr", "-3", input=data, check=False)
            if three.returncode == 0:
                results.append((patch.name, "needs 3-way"))
            else:
                git(tree, "am", "--abort", check=False)
                results.append((patch.name, "conflicts"))
        width = max((len(n) for n, _ in results), default=10)
        print(f"drift of the series against apache-airflow-core {version}:")
        for name, status in results:
            print(f"  {name:<{width}}  {status}")
        bad = sum(1 for _, s in results if s in ("needs 3-way", "conflicts"))
        print(f"{len(results)} patches: {len(results) - bad} apply as they are, {bad} need work")
        return 1 if bad else 0
    finally:
        shutil.rmtree(tree, ignore_errors=True)
