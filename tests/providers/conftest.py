"""Fixtures for the AIP-97 provider tests (Kubernetes, Celery, ECS executors).

Airflow reads its configuration when it is first imported, so the environment (a private
AIRFLOW_HOME and a private PostgreSQL database) is set here, before any test module imports it.
The database is only created and migrated when a test asks for the ``airflow_db`` fixture.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

import harness

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"
PG_ADMIN_URL = "postgresql://postgres:postgres@127.0.0.1:5432/postgres"

_HOME = Path(tempfile.mkdtemp(prefix="aip97-prov-"))
DB_NAME = f"t_prov_{uuid.uuid4().hex[:10]}"
DB_URL = f"postgresql+psycopg2://postgres:postgres@127.0.0.1:5432/{DB_NAME}"

TEST_ENV = {
    "AIRFLOW_HOME": str(_HOME),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(_HOME / "dags"),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": DB_URL,
    "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(_HOME / "logs"),
}
os.environ.update(TEST_ENV)
(_HOME / "dags").mkdir()


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: slow end-to-end test with real Airflow processes")
    config.addinivalue_line("markers", "db: needs the migrated Airflow metadata database")


def pytest_unconfigure(config):
    shutil.rmtree(_HOME, ignore_errors=True)


_psql = harness.pg_admin_execute


@pytest.fixture(scope="session")
def airflow_db():
    """Create and migrate a private PostgreSQL metadata database; drop it afterwards."""
    _psql(f'CREATE DATABASE "{DB_NAME}"')
    try:
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            env={**os.environ, **TEST_ENV},
            check=True,
            capture_output=True,
            timeout=600,
        )
        yield DB_URL
    finally:
        from airflow import settings

        if settings.engine is not None:
            settings.engine.dispose()
        _psql(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
