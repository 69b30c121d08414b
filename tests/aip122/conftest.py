"""
Fixtures for the AIP-122 (infrastructure retries) tests.

Two kinds of tests live here:

* database-level tests (``test_decide_retry_db.py``, ``test_serialization.py``) run the patched
  Airflow in the pytest process against a private PostgreSQL database migrated with
  ``airflow db migrate``; they create real Dag runs and TaskInstance rows and drive the failure
  handling through ``TaskInstance.handle_failure`` / ``decide_retry``;
* end-to-end tests (``test_e2e.py``, marked ``e2e``) start real ``api-server``, ``dag-processor``
  and ``scheduler`` processes (LocalExecutor) through ``tests/harness.py``; their tasks SIGKILL
  their own LocalExecutor worker.

The pytest process must run with the patched venv (``.venv/bin/python -m pytest``, as ``dev/run_tests.py`` runs it).
Airflow reads its settings when first imported, so the database of the in-process tests is created
and put into the environment in ``pytest_configure``, before any test module imports Airflow.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

import harness  # noqa: E402

VENV = Path(sys.prefix)
_DB_CTX: contextlib.AbstractContextManager | None = None
_HOME: tempfile.TemporaryDirectory | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _DB_CTX, _HOME
    config.addinivalue_line("markers", "e2e: end-to-end test with real Airflow processes (slow)")
    config.addinivalue_line("markers", "postgres: needs the PostgreSQL server from .ci/services.sh")
    if os.environ.get("AIP122_DB_URL") or not harness.pg_available():
        return
    _DB_CTX = harness.pg_database("t_aip122_db")
    url = _DB_CTX.__enter__()
    _HOME = tempfile.TemporaryDirectory(prefix="aip122_home_")
    home = Path(_HOME.name)
    (home / "dags").mkdir()
    (home / "dags" / "aip122_db_dag.py").write_text((HERE / "dags" / "aip122_db_dag.py").read_text())
    os.environ.update(
        {
            "AIP122_DB_URL": url,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        }
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    if _DB_CTX is not None:
        with contextlib.suppress(Exception):
            from airflow import settings

            if settings.engine is not None:
                settings.engine.dispose()
        _DB_CTX.__exit__(None, None, None)
    if _HOME is not None:
        _HOME.cleanup()


@pytest.fixture(scope="session")
def db_env() -> harness.AirflowEnv:
    """The in-process database, migrated, with ``dags/aip122_db_dag.py`` serialized into it."""
    url = os.environ.get("AIP122_DB_URL")
    if not url:
        pytest.fail("PostgreSQL at 127.0.0.1:5432 is not reachable; run .ci/services.sh")
    home = Path(os.environ["AIRFLOW_HOME"])
    env = harness.AirflowEnv(VENV, home, db_url=url, dags_folder=home / "dags")
    env.airflow("db", "migrate", timeout=300)
    env.airflow("dags", "reserialize", timeout=120)
    return env


@pytest.fixture(scope="session")
def require_postgres() -> None:
    if not harness.pg_available():
        pytest.fail("PostgreSQL at 127.0.0.1:5432 is not reachable; run .ci/services.sh")
