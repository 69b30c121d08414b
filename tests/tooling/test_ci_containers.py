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
""".ci/containers.sh: ``make image`` needs a container engine only; debootstrap (and root to install
it) only for the stand-in base (``make base-image``) and the targets that build it (issue 38).

The real script runs with a PATH of its own: a ``docker`` that answers ``docker info`` (as a Docker
engine does) or one that does not, ``podman``/``runc``/``debootstrap`` present or not. The script's
``--list`` names what a target needs on the machine it runs on, without installing anything; without
``--list`` it fails, naming the command, when one is missing and it cannot install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.line_independent  # CI's own scripts, the same for every line

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "containers.sh"
BASH = shutil.which("bash") or "/bin/bash"


def machine(tmp_path: Path, *, docker_answers: bool | None, present: tuple[str, ...] = ()) -> Path:
    """A bin directory: ``docker`` (answering or not; ``None``: absent), the ``present`` commands, and
    the few utilities the script uses. No apt-get: nothing can be installed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("id", "cut"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    stubs = dict.fromkeys(present, "exit 0")
    if docker_answers is not None:
        stubs["docker"] = "exit 0" if docker_answers else "echo 'Cannot connect to the Docker daemon' >&2; exit 1"
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!{BASH}\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def run(bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(SCRIPT), *args], env={"PATH": str(bin_dir)}, capture_output=True, text=True, check=False
    )


def test_the_image_needs_no_debootstrap_when_docker_answers(tmp_path: Path) -> None:
    bin_dir = machine(tmp_path, docker_answers=True)
    assert run(bin_dir, "--list", "image").stdout.split() == []
    assert run(bin_dir, "--list", "base-image").stdout.split() == ["debootstrap"]
    assert run(bin_dir, "--list", "all").stdout.split() == ["debootstrap"]
    proc = run(bin_dir, "image")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_the_image_needs_podman_and_runc_but_no_debootstrap_without_docker(tmp_path: Path) -> None:
    bin_dir = machine(tmp_path, docker_answers=False, present=("podman", "runc"))
    assert run(bin_dir, "--list", "image").stdout.split() == ["podman", "runc"]
    assert run(bin_dir, "--list", "base-image").stdout.split() == ["debootstrap", "podman", "runc"]
    proc = run(bin_dir, "image")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_the_stand_in_base_requires_debootstrap(tmp_path: Path) -> None:
    bin_dir = machine(tmp_path, docker_answers=True)
    for target in ("base-image", "all"):
        proc = run(bin_dir, target)
        assert proc.returncode != 0
        # As a user: "debootstrap is missing ... only root can install it"; as root: "installing
        # debootstrap", then apt-get is not there (this PATH has none).
        assert "debootstrap" in proc.stderr, proc.stderr


def test_an_image_without_any_engine_names_the_missing_one(tmp_path: Path) -> None:
    bin_dir = machine(tmp_path, docker_answers=None, present=("runc",))
    proc = run(bin_dir, "image")
    assert proc.returncode != 0 and "podman" in proc.stderr and "debootstrap" not in proc.stderr


def test_an_unknown_target_is_a_usage_error(tmp_path: Path) -> None:
    proc = run(machine(tmp_path, docker_answers=True), "--list", "imag")
    assert proc.returncode == 2 and "unknown target 'imag'" in proc.stderr


@pytest.mark.parametrize(
    ("target", "expected"),
    [("image", "containers.sh image"), ("base-image", "containers.sh base-image"), ("test-e2e", "containers.sh all")],
)
def test_make_asks_each_target_for_its_own_tools(target: str, expected: str) -> None:
    proc = subprocess.run(
        ["make", "-n", "-C", str(REPO), target, "BASE=apache/airflow:3.3.2-python3.12"],
        capture_output=True,
        text=True,
        check=True,
    )
    calls = [line.strip() for line in proc.stdout.splitlines() if "containers.sh" in line]
    assert calls == [f"bash .ci/{expected}"], proc.stdout
