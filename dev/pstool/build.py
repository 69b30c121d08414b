"""Build patched wheels: pristine pinned wheel + the files the series changes, re-versioned.

Only the distributions the series touches are built. Each gets the local version label from
``upstream.lock`` (``[patchset] local_version``), a ``patchset.json`` manifest in its dist-info,
a regenerated RECORD, and is zipped reproducibly (sorted members, fixed timestamps).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import zipfile
from pathlib import Path

from pstool import PatchsetError
from pstool.git import git, out
from pstool.layout import tree_to_wheels
from pstool.lock import Lock, PinnedFile, fetch, load_lock
from pstool.lock import local_version as lock_local_version
from pstool.paths import DIST_DIR, LOCK_FILE, tree_dir
from pstool.tree import BASE_REF

ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def local_version() -> str:
    """The selected line's label (:func:`pstool.lock.local_version`)."""
    return lock_local_version(LOCK_FILE)


def dist_dir() -> Path:
    return Path(os.environ.get("PATCHSET_DIST", DIST_DIR))


def changed_files(tree: Path) -> dict[str, str]:
    """{tree path: 'A'|'M'|'D'} for everything the series changes."""
    raw = out(tree, "diff", "--no-renames", "--name-status", BASE_REF, "HEAD")
    changes = {}
    for line in raw.splitlines():
        status, path = line.split("\t", 1)
        changes[path] = status[0]
    return changes


def applied_patches(tree: Path) -> list[dict[str, str]]:
    """The series as applied in the tree: name, feature, subject and the patch-id of each commit."""
    from pstool.series import parse_trailers
    from pstool.tree import commit_patch_names

    result = []
    for sha, name, feature in commit_patch_names(tree):
        trailers = parse_trailers(out(tree, "log", "-1", "--format=%B", sha))
        diff = git(tree, "show", "--format=", "--full-index", sha).stdout
        patch_id = git(tree, "patch-id", "--stable", input=diff).stdout.decode().split(" ")[0]
        result.append(
            {
                "name": name,
                "feature": feature,
                "upstream_status": trailers.get("Upstream-Status", ""),
                "subject": out(tree, "log", "-1", "--format=%s", sha),
                "patch_id": patch_id,
            }
        )
    return result


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repack_wheel(
    pinned: PinnedFile,
    source: Path,
    replacements: dict[str, bytes | None],
    label: str,
    manifest: dict,
    dest_dir: Path,
) -> Path:
    """Write a new wheel: ``replacements`` maps member -> new bytes (None deletes)."""
    norm = pinned.name.replace("-", "_")
    old_info = f"{norm}-{pinned.version}.dist-info/"
    new_version = f"{pinned.version}+{label}"
    new_info = f"{norm}-{new_version}.dist-info/"
    members: dict[str, bytes] = {}
    with zipfile.ZipFile(source) as zf:
        for info in zf.infolist():
            if info.is_dir() or info.filename == old_info + "RECORD":
                continue
            name = info.filename
            data = zf.read(info)
            if name.startswith(old_info):
                name = new_info + name[len(old_info) :]
                if name == new_info + "METADATA":
                    data = re.sub(
                        rb"^Version: .*$", f"Version: {new_version}".encode(), data, count=1, flags=re.M
                    )
            members[name] = data
    for name, data in replacements.items():
        if data is None:
            if name not in members:
                raise PatchsetError(f"series deletes {name}, which {pinned.file} does not have")
            del members[name]
        else:
            members[name] = data
    members[new_info + "patchset.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    record_lines = [f"{name},{_record_hash(data)},{len(data)}" for name, data in sorted(members.items())]
    record_lines.append(f"{new_info}RECORD,,")
    members[new_info + "RECORD"] = ("\n".join(record_lines) + "\n").encode()
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / f"{norm}-{new_version}-py3-none-any.whl"
    tmp = target.with_suffix(".tmp")

    def order(name: str) -> tuple[int, str]:  # dist-info last, RECORD very last, as wheel tools do
        return (2 if name.endswith("/RECORD") and name.startswith(new_info) else int(name.startswith(new_info)), name)

    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(members, key=order):
            info = zipfile.ZipInfo(name, ZIP_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, members[name])
    tmp.replace(target)
    return target


def build(tree: Path | None = None, lock: Lock | None = None, dest: Path | None = None) -> list[Path]:
    tree = tree or tree_dir()
    lock = lock or load_lock()
    dest = dest or dist_dir()
    if not (tree / ".git").exists():
        raise PatchsetError(f"{tree} is not a checkout; run `pstool checkout` first")
    if out(tree, "status", "--porcelain", "--untracked-files=no"):
        raise PatchsetError(f"{tree} has uncommitted changes; commit them (with a Feature: trailer) first")
    files = fetch(lock, quiet=True)
    label = local_version()
    names = [w.name for w in lock.wheels]
    per_dist: dict[str, dict[str, bytes | None]] = {}
    for path, status in sorted(changed_files(tree).items()):
        for dist, member in tree_to_wheels(path, names):
            data = None if status == "D" else (tree / path).read_bytes()
            per_dist.setdefault(dist, {})[member] = data
    ui_note = None
    from pstool import ui

    if ui.touches_ui(tree, BASE_REF):
        # The series changes the UI: the core wheel gets a dist built from the patched source in
        # place of the released one (pstool.ui, cached by the UI source's content).
        dist = ui.build_dist(tree, lock)
        core = lock.wheel("apache-airflow-core")
        with zipfile.ZipFile(files[core.file]) as zf:
            released = [n for n in zf.namelist() if n.startswith("airflow/ui/dist/")]
        replacements = per_dist.setdefault(core.name, {})
        replacements.update(dict.fromkeys(released))
        replacements.update(ui.dist_members(dist))
        ui_note = {"ui_source_key": ui.source_key(tree, lock), "ui_dist": "built from the patched UI source"}
    patches = applied_patches(tree)
    base = out(tree, "rev-parse", BASE_REF)
    for old in dest.glob("*.whl") if dest.exists() else []:
        old.unlink()
    built = []
    for pinned in lock.wheels:
        if pinned.name not in per_dist:
            continue
        manifest = {
            "distribution": pinned.name,
            "upstream_version": pinned.version,
            "upstream_sha256": pinned.sha256,
            "upstream_commit": lock.commit,
            "local_version": label,
            "base_tree_commit": base,
            "patches": patches,
            "files_changed": sorted(m for m in per_dist[pinned.name] if not m.startswith("airflow/ui/dist/")),
        }
        if ui_note and pinned.name == "apache-airflow-core":
            manifest.update(ui_note)
        built.append(repack_wheel(pinned, files[pinned.file], per_dist[pinned.name], label, manifest, dest))
    return built
