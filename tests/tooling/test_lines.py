"""Release lines: PATCHSET_LINE picks a line's lock, series, tree, venv and dist; the lines' locks are sound.

Every line lives under ``lines/<line>/`` and builds under ``build/<line>/`` and ``dist/<line>/``; only
the venv of the default line keeps the name ``.venv``. The checks of a line's files run in that
line's own session (its files are fetched by that session, never by another's).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
import lines  # noqa: E402  (the session's line)

SESSION_LOCK = REPO / "lines" / lines.LINE / "upstream.lock"


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


@pytest.mark.line_independent
@pytest.mark.parametrize("line", ["3.3", "3.4"])
def test_every_line_lives_under_lines_and_builds_apart(line: str) -> None:
    paths = _paths(line)
    assert paths["line"] == line
    assert paths["lock"] == str(REPO / "lines" / line / "upstream.lock")
    assert paths["patches"] == str(REPO / "lines" / line / "patches")
    assert paths["tree"] == str(REPO / "build" / line / "tree")
    assert paths["build"] == str(REPO / "build" / line)
    assert paths["dist"] == str(REPO / "dist" / line)
    assert paths["venv"] == str(REPO / (".venv" if line == "3.3" else f".venv-{line}"))


@pytest.mark.line_independent
def test_an_unset_line_is_the_default_one_the_makefile_names() -> None:
    for line in (None, ""):
        assert _paths(line) == _paths("3.3")
    makefile = (REPO / "Makefile").read_text()
    assert "\nLINE ?= 3.3\n" in makefile


@pytest.mark.line_independent
def test_nothing_of_a_line_is_left_outside_lines() -> None:
    """The symmetric layout: no line keeps its lock, series or constraints at the repository root."""
    for stray in ("upstream.lock", "patches", "dev/constraints.txt"):
        assert not (REPO / stray).exists(), f"{stray} belongs under lines/<line>/"
    for line_dir in sorted(p for p in (REPO / "lines").iterdir() if p.is_dir()):
        for needed in ("upstream.lock", "constraints.txt", "line.toml", "patches/series"):
            assert (line_dir / needed).is_file(), f"{line_dir.name} lacks {needed}"


@pytest.mark.line_independent
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


def test_the_line_pins_one_release_and_the_commit_its_core_wheel_names() -> None:
    """The session's lock pins core and task-sdk of one release, the meta-distribution, and the commit."""
    data = tomllib.loads(SESSION_LOCK.read_text())
    dists = {d["name"]: d for d in data["dist"]}
    release = data["upstream"]["release"]
    assert dists["apache-airflow-core"]["version"] == release
    assert dists["apache-airflow"]["version"] == release
    wheel = _fetched(dists["apache-airflow-core"]["file"])
    with zipfile.ZipFile(wheel) as zf:
        git_version = zf.read("airflow/git_version").decode()
    assert data["upstream"]["commit"] in git_version


@pytest.mark.line_independent
def test_every_line_carries_the_same_provider_pins() -> None:
    """Providers are pinned alike on every line unless a line must move one (it says so in its lock)."""
    def providers(lock: Path) -> dict[str, str]:
        data = tomllib.loads(lock.read_text())
        return {d["name"]: d["version"] for d in data["dist"] if d["name"].startswith("apache-airflow-providers-")}

    locks = sorted((REPO / "lines").glob("*/upstream.lock"))
    assert len(locks) >= 2
    for lock in locks:
        assert providers(lock) == providers(locks[0]), lock


def _fetched(name: str) -> Path:
    """A pinned file of the session's line, fetched by this session if it is not there yet."""
    sys.path.insert(0, str(REPO / "dev"))
    from pstool.lock import fetch, load_lock

    return next(path for path in fetch(load_lock(SESSION_LOCK), quiet=True).values() if path.name == name)


def _line_files(lock: Path) -> tuple[Path, Path | None]:
    """(the line's constraints, its line.toml or None) as pstool.venv / pstool.lines pick them."""
    toml = lock.parent / "line.toml"
    return lock.parent / "constraints.txt", toml if toml.is_file() else None


def _sdk_wheel_text(lock: Path, member: str) -> str:
    data = tomllib.loads(lock.read_text())
    dist = next(d for d in data["dist"] if d["name"] == "apache-airflow-task-sdk")
    with zipfile.ZipFile(_fetched(dist["file"])) as zf:
        return zf.read(member).decode()


@pytest.mark.parametrize("lock", [SESSION_LOCK])
def test_each_line_pins_the_model_generator_its_release_was_generated_with(lock: Path) -> None:
    """The line's constraints pin the datamodel-code-generator named in its release's _generated.py header
    (a different version rewrites the header and the models; `pstool verify` proves the whole output)."""
    header = _sdk_wheel_text(lock, "airflow/sdk/api/datamodels/_generated.py").splitlines()[:4]
    (released,) = [line.split(":", 1)[1].strip() for line in header if line.startswith("#   version:")]
    constraints, _ = _line_files(lock)
    pins = [line.split("==", 1)[1].strip() for line in constraints.read_text().splitlines() if line.startswith("datamodel-code-generator==")]
    assert pins == [released], f"{constraints.relative_to(REPO)} pins {pins}, the release was generated with {released}"


@pytest.mark.parametrize("lock", [SESSION_LOCK])
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


def _skips(env_value: str, session_line: str, *paths: str) -> dict[str, str]:
    """Run ``paths`` in a pytest session of ``session_line``; the skip reason of each skipped test file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHSET_")}
    env.update(PATCHSET_LINE=session_line, PATCHSET_LINE_INDEPENDENT_ON=env_value)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *paths],
        cwd=lines.REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 5), done.stdout + done.stderr
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith("SKIPPED ["):
            where, _, reason = line.split("] ", 1)[1].partition(": ")
            found[where.split(":")[0]] = reason
    return found


@pytest.mark.line_independent
def test_line_independent_tests_move_to_the_line_named_only_under_the_paths_given() -> None:
    moved, stays = "tests/ui/test_ui_lint.py", "tests/tooling/test_lines.py"
    # The default line's session: the moved file is skipped, saying where it runs; the other one runs.
    stays_test = f"{stays}::test_nothing_of_a_line_is_left_outside_lines"
    skips = _skips("3.4:ui", lines.DEFAULT_LINE, moved, stays_test)
    assert set(skips) == {moved}
    assert skips[moved].startswith("line-independent: runs in the 3.4 line's session only")
    # Without paths, everything moves.
    skips = _skips("3.4", lines.DEFAULT_LINE, stays_test)
    assert set(skips) == {stays}
