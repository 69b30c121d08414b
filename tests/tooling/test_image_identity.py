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
"""The image carries its label, commit and series hash, and ``airflow-patchset check`` prints them
(issue 38). Unit level: ``docker/patchset.py``'s functions run here with this interpreter (an image
build is slow; tests/image builds real ones), ``pstool.image`` computes what the build passes, and the
Dockerfile declares and records every one of those build arguments.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.line_independent

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "dev") not in sys.path:
    sys.path.insert(0, str(REPO / "dev"))

from pstool import image as pstool_image  # noqa: E402
from pstool.lock import local_version  # noqa: E402
from pstool.paths import LOCK_FILE, PATCHES_DIR  # noqa: E402
from pstool.releases import series_hash  # noqa: E402

INSTALLER = pstool_image.installer()


def test_identify_writes_what_check_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    release = tmp_path / "patchset-release.json"
    digest = "ab" * 32
    rc = INSTALLER.main(
        ["identify", "--label", "ps.7", "--commit", "c0ffee" * 6 + "abcd", "--series-hash", digest, "--line", "3.3", "--out", str(release)]
    )
    assert rc == 0
    assert json.loads(release.read_text()) == {"label": "ps.7", "commit": "c0ffee" * 6 + "abcd", "series_hash": digest, "line": "3.3"}
    capsys.readouterr()
    pytest_version = importlib.metadata.version("pytest")
    constraints = tmp_path / "patchset-constraints.txt"
    constraints.write_text(f"# the patched distributions\npytest=={pytest_version}\n")
    rc = INSTALLER.main(["check", "--constraints", str(constraints), "--release", str(release)])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.splitlines()[0] == f"patch set ps.7 (line 3.3), commit {'c0ffee' * 6 + 'abcd'}, series {digest}"
    assert f"ok  pytest=={pytest_version}" in out


def test_check_says_when_the_image_does_not_name_its_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    constraints = tmp_path / "patchset-constraints.txt"
    constraints.write_text(f"pytest=={importlib.metadata.version('pytest')}\n")
    rc = INSTALLER.main(["check", "--constraints", str(constraints), "--release", str(tmp_path / "missing.json")])
    assert rc == 0
    assert "does not say which release it is" in capsys.readouterr().out


def test_the_image_identity_is_the_lock_label_the_commit_and_the_series_hash() -> None:
    identity = pstool_image.image_identity(pstool_image.local_version_label())
    assert identity["label"] == local_version(LOCK_FILE)
    assert identity["series_hash"] == series_hash(PATCHES_DIR) and re.fullmatch(r"[0-9a-f]{64}", identity["series_hash"])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    assert identity["commit"] in (head, f"{head}-dirty")


def test_the_series_hash_changes_with_any_byte_of_the_series(tmp_path: Path) -> None:
    patches = tmp_path / "patches"
    (patches / "f").mkdir(parents=True)
    (patches / "series").write_text("f/0001-a.patch\n")
    (patches / "f" / "0001-a.patch").write_text("one\n")
    first = series_hash(patches)
    (patches / "f" / "0001-a.patch").write_text("one!\n")
    assert series_hash(patches) != first
    (patches / "f" / "0001-a.patch").write_text("one\n")
    assert series_hash(patches) == first
    (patches / "f" / "0001-a.patch").rename(patches / "f" / "0001-b.patch")
    assert series_hash(patches) != first


def test_the_dockerfile_records_every_identity_build_argument() -> None:
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    identity = {"label": "ps.3", "commit": "c", "series_hash": "h", "line": "3.3"}
    args = pstool_image.identity_build_args(identity)
    passed = [args[i + 1].split("=", 1)[0] for i in range(0, len(args), 2)]
    assert sorted(passed) == sorted(pstool_image.IDENTITY_ARGS.values())
    identify = dockerfile.split("airflow-patchset identify", 1)[1]
    for key, arg in pstool_image.IDENTITY_ARGS.items():
        assert re.search(rf"^ARG {arg}=", dockerfile, flags=re.M), arg
        assert f'--{key.replace("_", "-")} "${{{arg}}}"' in identify, arg
