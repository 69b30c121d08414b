"""The line's venv holds the patched wheels built from its series: check what was installed."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))
from pstool.lock import load_lock, local_version  # noqa: E402
from pstool.paths import LOCK_FILE, PATCHES_DIR  # noqa: E402

LOCK = load_lock()  # the session's line


def _series() -> list[str]:
    """The full series' patch names (every feature, and the integration patches whose conditions hold)."""
    from pstool.series import full_selection, load_series

    return [p.name for p in full_selection(load_series(PATCHES_DIR))]


def test_core_and_sdk_carry_the_local_version_label() -> None:
    for name in ("apache-airflow-core", "apache-airflow-task-sdk"):
        assert importlib.metadata.version(name) == f"{LOCK.wheel(name).version}+{local_version(LOCK_FILE)}"


def test_pip_check_passes() -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_airflow_version_prints_the_upstream_release() -> None:
    airflow = Path(sys.executable).parent / "airflow"
    proc = subprocess.run([str(airflow), "version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == LOCK.release


def test_installed_manifest_lists_the_series() -> None:
    manifest = json.loads(importlib.metadata.distribution("apache-airflow-core").read_text("patchset.json"))
    core_patches = [p["name"] for p in manifest["patches"]]
    assert core_patches == _series()
    assert manifest["upstream_commit"] == LOCK.commit


def test_the_venv_holds_exactly_the_bytes_of_the_built_wheels() -> None:
    """Every file of every patched wheel in dist/<line>/ is installed with the wheel's bytes.

    ``pstool install`` skips its ``--force-reinstall`` pass for a venv it has just created (the first
    pip install put the built wheels in); a venv holding an earlier build of the same version gets
    it. Either way the installed files must be the wheels' own, or tests would run stale code.
    """
    import base64
    import csv
    import hashlib
    import io
    import zipfile

    from pstool.build import dist_dir

    wheels = sorted(dist_dir().glob("*.whl"))
    assert wheels, f"no patched wheels in {dist_dir()}"
    site = Path(importlib.metadata.distribution("apache-airflow-core").locate_file(""))
    checked = 0
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            record = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
            for path, digest, _size in csv.reader(io.TextIOWrapper(archive.open(record), encoding="utf-8")):
                if not digest or ".dist-info/" in path:
                    continue
                algorithm, _, expected = digest.partition("=")
                installed = hashlib.new(algorithm, (site / path).read_bytes()).digest()
                assert base64.urlsafe_b64encode(installed).rstrip(b"=").decode() == expected, f"{path} is not {wheel.name}'s"
                checked += 1
    assert checked > 1000
