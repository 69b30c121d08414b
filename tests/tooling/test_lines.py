"""Release lines: PATCHSET_LINE picks a line's lock, series, tree, venv and dist; the lines' locks are sound."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _paths(line: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHSET_")}
    if line is not None:
        env["PATCHSET_LINE"] = line
    code = (
        "import json; from pstool import paths as p; print(json.dumps({'line': p.LINE, 'lock': str(p.LOCK_FILE),"
        " 'patches': str(p.PATCHES_DIR), 'tree': str(p.tree_dir()), 'venv': str(p.venv_dir()),"
        " 'dist': str(p.DIST_DIR), 'build': str(p.BUILD_DIR)}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env={**env, "PYTHONPATH": str(REPO / "dev")}, capture_output=True, text=True
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr)
    import json

    return json.loads(proc.stdout)


def test_the_default_line_keeps_its_historical_places() -> None:
    for line in (None, "", "3.3"):
        paths = _paths(line)
        assert paths["line"] == "3.3"
        assert paths["lock"] == str(REPO / "upstream.lock")
        assert paths["patches"] == str(REPO / "patches")
        assert paths["tree"] == str(REPO / "build" / "tree")
        assert paths["venv"] == str(REPO / ".venv")
        assert paths["dist"] == str(REPO / "dist")


def test_another_line_lives_under_lines_and_builds_apart() -> None:
    paths = _paths("3.4")
    assert paths["lock"] == str(REPO / "lines" / "3.4" / "upstream.lock")
    assert paths["patches"] == str(REPO / "lines" / "3.4" / "patches")
    assert paths["tree"] == str(REPO / "build" / "3.4" / "tree")
    assert paths["venv"] == str(REPO / ".venv-3.4")
    assert paths["dist"] == str(REPO / "dist" / "3.4")


def test_an_unknown_line_is_a_clear_error_naming_the_known_ones() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pstool", "verify"],
        env={**os.environ, "PYTHONPATH": str(REPO / "dev"), "PATCHSET_LINE": "9.9"},
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode != 0
    assert "unknown release line '9.9'" in proc.stderr
    assert "3.3, 3.4" in proc.stderr


@pytest.mark.parametrize("lock", [REPO / "upstream.lock", *sorted((REPO / "lines").glob("*/upstream.lock"))])
def test_each_line_pins_one_release_and_the_commit_its_core_wheel_names(lock: Path) -> None:
    """A line's lock pins core and task-sdk of one release, the meta-distribution, and the commit."""
    data = tomllib.loads(lock.read_text())
    dists = {d["name"]: d for d in data["dist"]}
    release = data["upstream"]["release"]
    assert dists["apache-airflow-core"]["version"] == release
    assert dists["apache-airflow"]["version"] == release
    wheel = REPO / ".cache" / "upstream" / dists["apache-airflow-core"]["file"]
    if not wheel.exists():
        pytest.skip(f"{wheel.name} is not fetched here (make fetch LINE=...)")
    with zipfile.ZipFile(wheel) as zf:
        git_version = zf.read("airflow/git_version").decode()
    assert data["upstream"]["commit"] in git_version


def test_every_line_carries_the_same_provider_pins() -> None:
    """Providers are pinned alike on every line unless a line must move one (it says so in its lock)."""
    def providers(lock: Path) -> dict[str, str]:
        data = tomllib.loads(lock.read_text())
        return {d["name"]: d["version"] for d in data["dist"] if d["name"].startswith("apache-airflow-providers-")}

    default = providers(REPO / "upstream.lock")
    for lock in sorted((REPO / "lines").glob("*/upstream.lock")):
        assert providers(lock) == default, lock
