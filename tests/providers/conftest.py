"""Fixtures for the AIP-97 provider tests (Kubernetes, Celery, ECS executors).

Airflow reads its configuration when it is first imported, so the environment of the in-process
tests (a private AIRFLOW_HOME and a private PostgreSQL database, ``tests/harness.py``'s ``Stack``
without components) is set here, before any test module imports it. The database is only created
(a copy of the migrated template) when a test asks for the ``airflow_db`` fixture.

The end-to-end Celery modules (test_celery_e2e.py, test_celery_worker_restart_e2e.py) share
``celery_stack``: api-server and Dag processor with the CeleryExecutor on a private ``redis-server``;
each module starts its own scheduler (its heartbeat timeout is its own) and its own worker.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import harness
import pytest
from _helpers import aip122_installed

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"

_HOME = Path(tempfile.mkdtemp(prefix="aip97-prov-"))
_DB_STACK = harness.Stack("t_prov", _HOME, components=())
TEST_ENV = _DB_STACK.process_env()
DB_URL = _DB_STACK.db_url
os.environ.update(TEST_ENV)


def pytest_unconfigure(config):
    _DB_STACK.stop()
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_db():
    """The private PostgreSQL metadata database, migrated; dropped at the end of the session."""
    _DB_STACK.start()
    try:
        yield DB_URL
    finally:
        from airflow import settings

        if settings.engine is not None:
            settings.engine.dispose()
        _DB_STACK.stop()


@pytest.fixture(scope="session")
def celery_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.Stack]:
    """api-server and Dag processor, CeleryExecutor, private Redis; schedulers and workers are the modules'."""
    config = {
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "1",
        "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",
        "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
    }
    if aip122_installed():
        config["AIRFLOW__CORE__MAX_INFRA_RETRIES"] = "1"
    with harness.Stack(
        "t_prov_celery",
        tmp_path_factory.mktemp("celery"),
        executor="CeleryExecutor",
        components=("api-server", "dag-processor"),
        dags=[HERE / "dags" / "aip97_celery_lost_worker.py", HERE / "dags" / "aip97_celery_worker_restart.py"],
        out_var="AIP97CEL_OUT",
        config=config,
    ) as stack:
        yield stack
