"""pstool.unpatched: the line's unpatched venv, a cache of the machine shared by every checkout."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

from pstool import unpatched  # noqa: E402
from pstool.lock import load_lock  # noqa: E402
from pstool.paths import LINE, for_line, machine_cache_dir  # noqa: E402
from pstool.unpatched import STAMP, build_key, default_path, unpatched_venv  # noqa: E402


def test_a_session_in_unit_test_mode_reuses_the_built_venv(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/upstream_unit sets Airflow's unit-test mode, whose import logs a line before the probe's
    version: the venv run_tests built must still be found working, not rebuilt (a rebuild took minutes
    and, with the same probe, failed: CI's tests/upstream_unit on the 3.3 line)."""
    venv = unpatched_venv(LINE)  # run_tests built it before the suite; built here if not
    marker = venv / "pyvenv.cfg"
    before = marker.stat().st_mtime_ns
    monkeypatch.setenv("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
    monkeypatch.setenv("_IN_UNIT_TESTS", "true")
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "sqlite:////nonexistent/dir/unit.db")
    assert unpatched_venv(LINE) == venv
    assert marker.stat().st_mtime_ns == before, "the working venv was rebuilt"


def test_the_venv_lives_in_the_machine_cache_outside_the_checkout_and_carries_its_key() -> None:
    """Every clone of the repository (CI makes two per run) finds the same venv: its place depends on
    what it is built from, not on the checkout; the stamp in it is that key."""
    if os.environ.get("AIRFLOW_UNPATCHED_VENV"):
        pytest.skip("AIRFLOW_UNPATCHED_VENV names another venv")
    venv = unpatched_venv(LINE)
    assert venv.parent == machine_cache_dir() / "unpatched"
    assert not venv.is_relative_to(REPO)
    where = for_line(LINE)
    key = build_key(LINE, load_lock(where.lock_file), where.constraints, providers=False)
    assert json.loads((venv / STAMP).read_text()) == key
    assert key["wheels"] == {load_lock(where.lock_file).wheel(n).file: load_lock(where.lock_file).wheel(n).sha256
                             for n in unpatched.BASE_DISTRIBUTIONS}


def test_the_key_changes_with_every_input(tmp_path: Path) -> None:
    where = for_line(LINE)
    lock = load_lock(where.lock_file)
    key = build_key(LINE, lock, where.constraints, providers=False)
    other_constraints = tmp_path / "constraints.txt"
    other_constraints.write_bytes(where.constraints.read_bytes() + b"# one more line\n")
    changed = [
        build_key(LINE, lock, other_constraints, providers=False),
        build_key(LINE, lock, where.constraints, providers=True),
        {**key, "python": "3.99.0"},
        {**key, "wheels": {**key["wheels"], next(iter(key["wheels"])): "0" * 64}},
    ]
    paths = {default_path(LINE, key=k) for k in changed} | {default_path(LINE, providers=True, key=changed[1])}
    assert default_path(LINE, key=key) not in paths
    assert len({default_path(LINE, key=k) for k in changed}) == len(changed)


@pytest.fixture
def fake_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine cache of its own, whose would-be venv runs the real unpatched venv's Python (so the
    probe passes) and whose rebuild stops at the fetch (the point where it starts building)."""
    real = unpatched_venv(LINE)
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHSET_MACHINE_CACHE", str(cache))
    monkeypatch.delenv("AIRFLOW_UNPATCHED_VENV", raising=False)
    venv = default_path(LINE)
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec "{real}/bin/python" "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    (venv / "bin" / "airflow").write_text("")

    def building(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("rebuilding")

    monkeypatch.setattr(unpatched, "fetch", building)
    return venv


def test_a_working_venv_without_its_stamp_is_rebuilt_not_reused(fake_cache: Path) -> None:
    """A build killed after pip installed most of it answers the probe, but was never stamped: it
    must not be taken for a finished one."""
    with pytest.raises(RuntimeError, match="rebuilding"):
        unpatched_venv(LINE)


def test_a_venv_stamped_for_another_key_is_rebuilt(fake_cache: Path) -> None:
    where = for_line(LINE)
    key = build_key(LINE, load_lock(where.lock_file), where.constraints, providers=False)
    (fake_cache / STAMP).write_text(json.dumps({**key, "constraints": "0" * 64}))
    with pytest.raises(RuntimeError, match="rebuilding"):
        unpatched_venv(LINE)
    (fake_cache / STAMP).write_text(json.dumps(key))
    assert unpatched_venv(LINE) == fake_cache


def test_a_venv_someone_named_is_reused_without_a_stamp(fake_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``AIRFLOW_UNPATCHED_VENV`` names a venv the caller built: reused whenever it works."""
    monkeypatch.setenv("AIRFLOW_UNPATCHED_VENV", str(fake_cache))
    assert unpatched_venv(LINE) == fake_cache


def test_only_venvs_of_the_same_kind_unused_for_a_week_are_pruned(tmp_path: Path) -> None:
    kept, old, fresh, other_kind = (tmp_path / n for n in ("3.3-base-aaa", "3.3-base-bbb", "3.3-base-ccc", "3.3-full-ddd"))
    for venv in (kept, old, fresh, other_kind):
        venv.mkdir()
        (venv / STAMP).write_text("{}")
    week_ago = time.time() - (unpatched.PRUNE_AFTER_DAYS * 86400 + 60)
    for venv in (old, other_kind):
        os.utime(venv / STAMP, (week_ago, week_ago))
    unpatched._prune(kept, "3.3-base")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3.3-base-aaa", "3.3-base-ccc", "3.3-full-ddd"]
