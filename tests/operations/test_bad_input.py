"""
Bad configuration gets a clear error naming the option, and nothing starts (docs/operations.md).

A scheduler started with ``[core] max_infra_retries = -1`` or ``[core] infra_retry_delay = abc``
exits at once with an error that names the option; it registers no job and changes no row of a
database that holds a queued task instance. (Before the validation, -1 was silently read as 0 and
``abc`` crashed the scheduler loop at the first infrastructure failure.) The downgrade run with the
vanilla build is the third bad input: ``test_rollback.py`` checks it on both backends.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import PATCHED_VENV, rows

import harness


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    base = tmp_path_factory.mktemp("bad-input")
    env = harness.AirflowEnv(PATCHED_VENV, base / "home", db_url=f"sqlite:///{base / 'airflow.db'}")
    env.airflow("db", "migrate", timeout=600)
    return env.db_url


@pytest.mark.e2e
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("max_infra_retries", "-1", "`[core] max_infra_retries` should be a number of 0 or more, not '-1'"),
        ("infra_retry_delay", "abc", 'Please check "infra_retry_delay" key in "core" section. Current value: "abc"'),
    ],
)
def test_scheduler_refuses_a_bad_infra_retry_option(
    migrated_db: str, tmp_path: Path, option: str, value: str, message: str
) -> None:
    before = {table: rows(migrated_db, f"SELECT COUNT(*) AS n FROM {table}")[0]["n"] for table in ("job", "log")}
    env = harness.AirflowEnv(
        PATCHED_VENV,
        tmp_path / "home",
        db_url=migrated_db,
        extra_env={f"AIRFLOW__CORE__{option.upper()}": value},
    )
    proc = env.airflow("scheduler", "--num-runs", "1", check=False, timeout=240)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert message in output, output[-3000:]
    assert "AirflowConfigException" in output
    after = {table: rows(migrated_db, f"SELECT COUNT(*) AS n FROM {table}")[0]["n"] for table in ("job", "log")}
    assert after == before
