"""
A venv that runs the provider wheels of THIS checkout on the unpatched Airflow 3.3.2 core.

The patched provider wheels keep their version (``X+ps.1``) whatever the code in them, so a plain
``pip install`` into an existing venv answers "Requirement already satisfied" and keeps the code of
an earlier build (``test_compat_venv.py`` shows it). So:

* the *base* (pinned 3.3.2 wheels, the providers' dependencies, the test tools) is built once per
  key: the sha256 of the unpatched wheels, the constraints and the requirement list. A different
  key rebuilds the venv from scratch;
* the provider wheels are then installed on every run with ``--force-reinstall --no-deps``, and
  :func:`assert_installed_from` checks, file by file, that the venv holds exactly what the wheels
  contain.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

PIP = ["-m", "pip", "--disable-pip-version-check", "--no-input"]
KEY_FILE = ".compat-venv-key.json"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def base_key(base_wheels: list[Path], requirements: list[str], constraints: Path | None) -> dict:
    """What the base of the venv is built from: a change to any of it rebuilds the venv."""
    return {
        "python": sys.version,
        "wheels": {w.name: sha256(w) for w in base_wheels},
        "requirements": requirements,
        "constraints": sha256(constraints) if constraints else None,
    }


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def prepare_base(
    venv: Path,
    *,
    base_wheels: list[Path],
    dependency_wheels: list[Path],
    requirements: list[str],
    constraints: Path | None = None,
    pip_args: list[str] | None = None,
) -> bool:
    """
    Make ``venv`` hold the base; return whether it was (re)built.

    ``dependency_wheels`` are installed with their dependencies when the base is built (so the venv
    has what they need) but are not part of the key: :func:`install_current` reinstalls them.
    """
    key = base_key(base_wheels, requirements, constraints)
    key_path = venv / KEY_FILE
    if venv_python(venv).exists() and key_path.exists() and json.loads(key_path.read_text()) == key:
        return False
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    constraint_args = ["-c", str(constraints)] if constraints else []
    subprocess.run(
        [
            str(venv_python(venv)),
            *PIP,
            "install",
            "-q",
            *(pip_args or []),
            *constraint_args,
            *map(str, base_wheels),
            *map(str, dependency_wheels),
            *requirements,
        ],
        check=True,
    )
    key_path.write_text(json.dumps(key, indent=1))
    return True


def install_current(venv: Path, wheels: list[Path], *, pip_args: list[str] | None = None) -> None:
    """Install ``wheels`` as they are now, replacing whatever build of the same version is there."""
    subprocess.run(
        [
            str(venv_python(venv)),
            *PIP,
            "install",
            "-q",
            "--force-reinstall",
            "--no-deps",
            *(pip_args or []),
            *map(str, wheels),
        ],
        check=True,
    )
    assert_installed_from(venv, wheels)


def site_packages(venv: Path) -> Path:
    out = subprocess.run(
        [str(venv_python(venv)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def assert_installed_from(venv: Path, wheels: list[Path]) -> None:
    """Fail unless every file of every wheel (but its dist-info) is installed byte for byte."""
    root = site_packages(venv)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            for member in zf.infolist():
                if member.is_dir() or ".dist-info/" in member.filename:
                    continue
                installed = root / member.filename
                assert installed.exists(), f"{wheel.name}: {member.filename} is not installed"
                assert installed.read_bytes() == zf.read(member), (
                    f"{wheel.name}: the installed {member.filename} is not the wheel's (stale build)"
                )
