"""
Fixtures for the AIP-122 (infrastructure retries) tests.

Two kinds of tests live here:

* database-level tests (``test_decide_retry_db.py``, ``test_atomic_grants.py``,
  ``test_infra_retry_metrics.py``, and for the retry-rules feature ``test_retry_rules_db.py``) run
  the patched Airflow in the pytest process against a private PostgreSQL database (a copy of the
  migrated template, ``tests/harness.py``) into which ``dags/aip122_db_dag.py`` and
  ``dags/aip122_rules_db_dag.py`` are serialized; they create real Dag runs and TaskInstance rows and
  drive the failure handling through ``TaskInstance.handle_failure`` / ``decide_retry``;
* end-to-end tests (``test_e2e.py``, ``test_worker_guarantees_e2e.py``, marked ``e2e``) share one
  stack (``e2e_stack``): api-server and Dag processor, on a database of their own, with
  ``[core] max_infra_retries = 1``; each module starts the scheduler(s) it needs with its own
  configuration.

The pytest process must run with the patched venv (``.venv/bin/python -m pytest``, as ``dev/run_tests.py`` runs it).
Airflow reads its settings when first imported, so the in-process stack's configuration is put into
the environment in ``pytest_configure``, before any test module imports Airflow; its database is
created when a test first asks for ``db_env``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import harness
import pytest

HERE = Path(__file__).resolve().parent
_HOME: tempfile.TemporaryDirectory | None = None
_DB_STACK: harness.Stack | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _HOME, _DB_STACK
    if os.environ.get("AIP122_DB_URL"):
        return
    _HOME = tempfile.TemporaryDirectory(prefix="aip122_home_")
    _DB_STACK = harness.Stack(
        "t_aip122_db",
        Path(_HOME.name),
        components=(),
        dags=[HERE / "dags" / "aip122_db_dag.py", HERE / "dags" / "aip122_rules_db_dag.py"],
    )
    os.environ.update(
        {**_DB_STACK.process_env(), "AIP122_DB_URL": _DB_STACK.db_url, "AIRFLOW__CORE__UNIT_TEST_MODE": "False"}
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    with contextlib.suppress(Exception):
        from airflow import settings

        if settings.engine is not None:
            settings.engine.dispose()
    if _DB_STACK is not None:
        _DB_STACK.stop()
    if _HOME is not None:
        _HOME.cleanup()


@pytest.fixture(scope="session")
def db_env() -> harness.AirflowEnv:
    """The in-process database, migrated, with ``dags/aip122_db_dag.py`` and ``aip122_rules_db_dag.py`` serialized."""
    if _DB_STACK is None:
        pytest.fail("AIP122_DB_URL is set: the in-process database is not this session's to make")
    _DB_STACK.start()
    _DB_STACK.env.airflow("dags", "reserialize", timeout=120)
    return _DB_STACK.env


@pytest.fixture(scope="session")
def e2e_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.Stack]:
    """
    The api-server and Dag processor of the end-to-end tests, with ``max_infra_retries = 1``.

    Shared by test_e2e.py and test_worker_guarantees_e2e.py; each starts its own scheduler(s) with
    the configuration it tests (``stack.start_component("scheduler", config=...)``) and stops them.
    The api-server decides the failures workers report (the trust-boundary tests need the feature
    on there); the failures of lost workers are the scheduler's to decide. Failures must be seen by
    the path under test, not by the (300 s) heartbeat timeout.
    """
    with harness.Stack(
        "t_aip122_e2e",
        tmp_path_factory.mktemp("aip122e2e"),
        components=("api-server", "dag-processor"),
        dags=[
            HERE / "dags" / "aip122_e2e_dags.py",
            HERE / "dags" / "aip122_guarantee_dags.py",
            HERE / "dags" / "aip122_resumable_dags.py",
        ],
        plugins=[HERE / "plugins"],
        out_var=("AIP122_OUT", "AIP122G_OUT"),
        config={
            "AIRFLOW__CORE__MAX_INFRA_RETRIES": "1",
            "AIRFLOW__CORE__INFRA_RETRY_DELAY": "1",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "300",
            # E-mails are recorded by a real backend callable instead of being sent over SMTP.
            "AIRFLOW__EMAIL__EMAIL_BACKEND": "aip122_email_sink.send_email",
            "PYTHONPATH": str(HERE / "pythonpath"),
        },
    ) as stack:
        yield stack
