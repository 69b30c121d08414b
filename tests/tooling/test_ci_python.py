""".ci/python.sh: CI finds a Python 3.11+ for the tooling, or says exactly what is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.line_independent  # CI's own scripts, the same for every line

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "python.sh"


def fake_bin(tmp_path: Path, **interpreters: str) -> Path:
    """A PATH directory holding only ``id`` and the given interpreters (name -> script or 'real')."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "id").symlink_to(shutil.which("id"))
    for name, body in interpreters.items():
        target = bindir / name
        if body == "real":
            target.symlink_to(sys.executable)
        else:
            target.write_text(f"#!/bin/sh\n{body}\n")
            target.chmod(0o755)
    return bindir


def run(bindir: Path) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    return subprocess.run(
        [bash, str(SCRIPT)], env={**os.environ, "PATH": str(bindir)}, capture_output=True, text=True, check=False
    )


OLD_PYTHON = 'case "$1" in --version) echo "Python 3.9.2";; *) exit 1;; esac'


def test_an_old_python3_without_a_newer_one_is_a_clear_error(tmp_path: Path) -> None:
    proc = run(fake_bin(tmp_path, python3=OLD_PYTHON))
    assert proc.returncode == 1
    assert "needs Python 3.11 or newer" in proc.stderr
    assert "this machine has Python 3.9.2" in proc.stderr
    assert proc.stdout == ""


def test_a_newer_interpreter_beside_an_old_python3_is_chosen(tmp_path: Path) -> None:
    proc = run(fake_bin(tmp_path, python3=OLD_PYTHON, **{"python3.12": "real"}))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "python3.12"


def test_a_suitable_python3_is_used_as_it_is(tmp_path: Path) -> None:
    proc = run(fake_bin(tmp_path, python3="real"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "python3"
