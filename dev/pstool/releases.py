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
"""What identifies a release of the patch set: its label, each line's series hash, and the record of both.

The *label* is each line's local version label (``lines/<line>/upstream.lock``, ``[patchset]
local_version``, e.g. ``ps.2``), which every patched wheel carries (``3.3.2+ps.2``) and the image's tag
(``airflow-patchset:3.3.2-ps.2``). The lines move together: ``make release`` bumps both.

The *series hash* of a line is the sha256 of its ``patches/`` directory (every file's path and bytes,
``series`` included): two images of one label from different series have different hashes.

``lines/releases.toml`` records every release made by ``make release`` (``pstool.release``): its label,
date, tags and each line's series hash. ``make image`` refuses to build a label recorded there from a
series whose hash is not the recorded one (:func:`check_label`).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tomllib
from pathlib import Path

from pstool import PatchsetError
from pstool.paths import LINES_DIR, ROOT, for_line

RELEASES_FILE = LINES_DIR / "releases.toml"
LABEL_RE = re.compile(r"ps\.(\d+)")


def series_hash(patches_dir: Path) -> str:
    """sha256 over every file under ``patches_dir``: its relative path and the sha256 of its bytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in patches_dir.rglob("*") if p.is_file()):
        digest.update(path.relative_to(patches_dir).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
    return digest.hexdigest()


def line_label(line: str) -> str:
    """``line``'s local version label, from its ``upstream.lock``."""
    from pstool.lock import local_version

    return local_version(for_line(line).lock_file)


def line_series_hash(line: str) -> str:
    return series_hash(for_line(line).patches_dir)


def load_releases(path: Path = RELEASES_FILE) -> list[dict]:
    """Every recorded release, oldest first (none when the file does not exist)."""
    if not path.is_file():
        return []
    try:
        return list(tomllib.loads(path.read_text()).get("release", []))
    except tomllib.TOMLDecodeError as err:
        raise PatchsetError(f"cannot read {path}: {err}") from err


def recorded(label: str, path: Path = RELEASES_FILE) -> dict | None:
    for release in load_releases(path):
        if release.get("label") == label:
            return release
    return None


def check_label(line: str, path: Path = RELEASES_FILE) -> str:
    """Refuse (:class:`PatchsetError`) when ``line``'s label was released from another series; return
    a line saying what was checked."""
    label, current = line_label(line), line_series_hash(line)
    release = recorded(label, path)
    if release is None:
        return f"{label} is not released yet (series {current[:16]})"
    released = (release.get("series") or {}).get(line)
    if released != current:
        raise PatchsetError(
            f"the label {label} was released on {release.get('date', '?')} from another {line} series "
            f"(series hash {str(released)[:16]}, {path.name}); lines/{line}/patches is now {current[:16]}. "
            "Two different images must not carry one label: cut a release (`make release`, "
            "docs/development/release.md) or build the released commit (`git checkout "
            f"{(release.get('tags') or ['the release tag'])[0]}`)."
        )
    return f"{label} released from this series ({current[:16]})"


def commit_of(root: Path = ROOT) -> str:
    """The repository's HEAD commit, with ``-dirty`` when lines/ or docker/ differ from it."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=False)
    if head.returncode != 0:
        return "unknown"
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "lines", "docker"], cwd=root, capture_output=True, text=True, check=False
    )
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
