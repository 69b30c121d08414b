"""
Bad configuration gets a clear error naming the option, and nothing starts (docs/operations.md).

A scheduler started with a bad infrastructure-retry option (``[core] max_infra_retries = -1``,
``[core] infra_retry_delay = abc``, ``[core] max_infra_retry_delay = nan``, ``[scheduler]
infra_retry_storm_threshold = -1``, ``[scheduler] infra_retry_storm_window = inf``) exits at once
with an error that names the option; it registers no job and adds no row to a
database the patched build filled (Dag runs, tries, asset events). (Before the validation, -1 was silently read as 0 and
``abc`` crashed the scheduler loop at the first infrastructure failure.) The downgrade run with the
vanilla build is the third bad input: ``test_rollback.py`` checks it on both backends.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import PATCHED_VENV

import harness


@pytest.fixture
def state_db(patched_state_sqlite, tmp_path: Path) -> str:
    """A copy of the database the patched build filled (Dag runs, tries, asset events)."""
    shutil.copy(patched_state_sqlite["db"], tmp_path / "airflow.db")
    return f"sqlite:///{tmp_path / 'airflow.db'}"


TABLES = ("job", "log", "dag_run", "task_instance", "asset_event")
#: (option, value, what the error says): docs/operations.md quotes these messages.
BAD_VALUES = [
    ("core", "max_infra_retries", "-1", "`[core] max_infra_retries` should be a number of 0 or more, not '-1'"),
    ("core", "infra_retry_delay", "abc", 'Please check "infra_retry_delay" key in "core" section. Current value: "abc"'),
    # Before issue 36 these three were clamped or passed through (nan and inf reached timedelta).
    (
        "core",
        "max_infra_retry_delay",
        "nan",
        "`[core] max_infra_retry_delay` should be a number of 0 or more, not 'nan'",
    ),
    (
        "scheduler",
        "infra_retry_storm_threshold",
        "-1",
        "`[scheduler] infra_retry_storm_threshold` should be a number of 0 or more, not '-1'",
    ),
    (
        "scheduler",
        "infra_retry_storm_window",
        "inf",
        "`[scheduler] infra_retry_storm_window` should be a number of 0 or more, not 'inf'",
    ),
]


@pytest.mark.e2e
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("section", "option", "value", "message"), BAD_VALUES)
def test_scheduler_refuses_a_bad_infra_retry_option(
    state_db: str, tmp_path: Path, section: str, option: str, value: str, message: str
) -> None:
    before = {table: harness.query(state_db, f"SELECT COUNT(*) AS n FROM {table}")[0]["n"] for table in TABLES}
    env = harness.AirflowEnv(
        PATCHED_VENV,
        tmp_path / "home",
        db_url=state_db,
        extra_env={f"AIRFLOW__{section.upper()}__{option.upper()}": value},
    )
    proc = env.airflow("scheduler", "--num-runs", "1", check=False, timeout=240)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert message in output, output[-3000:]
    assert "AirflowConfigException" in output
    after = {table: harness.query(state_db, f"SELECT COUNT(*) AS n FROM {table}")[0]["n"] for table in TABLES}
    assert after == before
