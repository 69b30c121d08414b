"""
The compatibility venv runs the code of this checkout, not an earlier build of the same version.

The patched provider wheels keep ``X+ps.N`` between releases. Installing a rebuilt wheel of an unchanged
version into a venv that has the old build is a no-op for a plain ``pip install`` ("Requirement
already satisfied"): that is how ``test_providers_on_unpatched_core.py`` used to test stale code.
Here two builds of one tiny wheel with the same name and version but different code show the bug
and check the fix (``compat_venv.install_current``), offline, in a real venv with a real pip.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from compat_venv import PIP, assert_installed_from, install_current, venv_python

NAME, VERSION = "aip97_compat_probe", "1.0+ps.1"


def build_wheel(out_dir: Path, code: str) -> Path:
    """Write ``aip97_compat_probe-1.0+ps.1`` whose module holds ``CODE = code``."""
    out_dir.mkdir(parents=True)
    dist_info = f"{NAME}-{VERSION}.dist-info"
    files = {
        f"{NAME}/__init__.py": f"CODE = {code!r}\n".encode(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = out_dir / f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return wheel


def installed_code(venv: Path) -> str:
    out = subprocess.run(
        [str(venv_python(venv)), "-c", f"import {NAME}; print({NAME}.CODE)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


@pytest.fixture(scope="module")
def probe_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("probe") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return venv


@pytest.fixture
def venv_with_old_build(probe_venv, tmp_path) -> tuple[Path, Path]:
    """A venv holding the first build; return it and the second build (same name and version)."""
    venv = probe_venv
    first = build_wheel(tmp_path / "dist-1", "first build")
    second = build_wheel(tmp_path / "dist-2", "second build")
    subprocess.run(
        [str(venv_python(venv)), *PIP, "install", "-q", "--no-index", "--force-reinstall", str(first)],
        check=True,
    )
    assert installed_code(venv) == "first build"
    return venv, second


def test_plain_pip_install_keeps_the_old_build(venv_with_old_build):
    """The bug: what the old compatibility test did leaves the first build's code in place."""
    venv, second = venv_with_old_build
    proc = subprocess.run(
        [str(venv_python(venv)), *PIP, "install", "--no-index", str(second)],
        capture_output=True,
        text=True,
        check=True,
    )
    # pip: "... is already installed with the same version as the provided wheel" (or, in older
    # releases, "Requirement already satisfied"), and it installs nothing.
    assert "already installed with the same version" in proc.stdout or "already satisfied" in proc.stdout
    assert installed_code(venv) == "first build"
    with pytest.raises(AssertionError, match="stale build"):
        assert_installed_from(venv, [second])


def test_install_current_installs_this_build(venv_with_old_build):
    venv, second = venv_with_old_build
    install_current(venv, [second], pip_args=["--no-index"])
    assert installed_code(venv) == "second build"
    assert_installed_from(venv, [second])
