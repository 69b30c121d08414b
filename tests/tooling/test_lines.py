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


def _line_files(lock: Path) -> tuple[Path, Path | None]:
    """(the line's constraints, its line.toml or None) as pstool.venv / pstool.lines pick them."""
    line_dir = lock.parent
    constraints = line_dir / "constraints.txt"
    if line_dir == REPO or not constraints.is_file():
        constraints = REPO / "dev" / "constraints.txt"
    toml = line_dir / "line.toml" if line_dir != REPO else None
    return constraints, toml if toml is not None and toml.is_file() else None


def _sdk_wheel_text(lock: Path, member: str) -> str:
    data = tomllib.loads(lock.read_text())
    dist = next(d for d in data["dist"] if d["name"] == "apache-airflow-task-sdk")
    wheel = REPO / ".cache" / "upstream" / dist["file"]
    if not wheel.exists():
        pytest.skip(f"{wheel.name} is not fetched here (make fetch LINE=...)")
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(member).decode()


@pytest.mark.parametrize("lock", [REPO / "upstream.lock", *sorted((REPO / "lines").glob("*/upstream.lock"))])
def test_each_line_pins_the_model_generator_its_release_was_generated_with(lock: Path) -> None:
    """The line's constraints pin the datamodel-code-generator named in its release's _generated.py header
    (a different version rewrites the header and the models; `pstool verify` proves the whole output)."""
    header = _sdk_wheel_text(lock, "airflow/sdk/api/datamodels/_generated.py").splitlines()[:4]
    (released,) = [line.split(":", 1)[1].strip() for line in header if line.startswith("#   version:")]
    constraints, _ = _line_files(lock)
    pins = [line.split("==", 1)[1].strip() for line in constraints.read_text().splitlines() if line.startswith("datamodel-code-generator==")]
    assert pins == [released], f"{constraints.relative_to(REPO)} pins {pins}, the release was generated with {released}"


@pytest.mark.parametrize("lock", [REPO / "upstream.lock", *sorted((REPO / "lines").glob("*/upstream.lock"))])
def test_each_line_renders_jsonvalue_as_its_released_supervisor_schema_does(lock: Path) -> None:
    """pydantic renders JsonValue as {}; a release whose schema.json files it typed needs the line's
    [generators] supervisor_typed_json_value, and one that has {} must not set it."""
    import json

    released = json.loads(_sdk_wheel_text(lock, "airflow/sdk/execution_time/schema/schema.json"))["$defs"]["JsonValue"]
    _, toml = _line_files(lock)
    typed = bool(toml and tomllib.loads(toml.read_text()).get("generators", {}).get("supervisor_typed_json_value"))
    sys.path.insert(0, str(REPO / "dev"))
    try:
        from dump_supervisor_schemas import TYPED_JSON_VALUE
    finally:
        sys.path.remove(str(REPO / "dev"))
    assert released == (TYPED_JSON_VALUE if typed else {})
