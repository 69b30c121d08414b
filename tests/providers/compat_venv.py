"""
A venv that runs the provider wheels of THIS checkout on the unpatched core of the line.

The patched provider wheels keep their version (``X+ps.N``) whatever the code in them, so a plain
``pip install`` into an existing venv answers "Requirement already satisfied" and keeps the code of
an earlier build (``test_compat_venv.py`` shows it). So:

* the *base* is a copy of the machine's unpatched venv with every pinned provider
  (``pstool.unpatched``: the line's pinned upstream wheels, their dependencies and the test tools),
  copied again whenever that venv is another build (its stamp changed). A copy, because the shared
  venv must never be installed into;
* the provider wheels are then installed on every run with ``--force-reinstall --no-deps``, and
  :func:`assert_installed_from` checks, file by file, that the venv holds exactly what the wheels
  contain.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

PIP = ["-m", "pip", "--disable-pip-version-check", "--no-input"]
KEY_FILE = ".compat-venv-key.json"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def copy_base(venv: Path, source: Path, *, stamp: str) -> bool:
    """
    Make ``venv`` a copy of the venv ``source``; return whether it was (re)copied.

    ``stamp`` is the name of the file in ``source`` that identifies its build: a copy is reused only
    while it carries the same. The venv's Python is a symlink to the interpreter and its modules are
    found relative to it, so a copy runs as its source does (``python -m ...``; the console scripts
    in its ``bin/`` still name the source).
    """
    key = {"source": str(source), "stamp": (source / stamp).read_text()}
    key_path = venv / KEY_FILE
    if venv_python(venv).exists() and key_path.exists() and json.loads(key_path.read_text()) == key:
        return False
    if venv.exists():
        shutil.rmtree(venv)
    partial = venv.with_name(venv.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    shutil.copytree(source, partial, symlinks=True)
    (partial / KEY_FILE).write_text(json.dumps(key, indent=1))
    partial.rename(venv)
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
