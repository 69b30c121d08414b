"""pstool.unpatched: the line's unpatched venv is found working from a session that configures Airflow."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

from pstool.paths import LINE  # noqa: E402
from pstool.unpatched import unpatched_venv  # noqa: E402


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
