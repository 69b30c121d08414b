"""
Fixtures for the asset.emit() tests.

One real Airflow stack (``tests/harness.py``'s ``Stack``) is shared by the whole session: a private
PostgreSQL database (a copy of the migrated template), an ``airflow api-server`` (Execution API +
REST API), an ``airflow dag-processor``, an ``airflow scheduler`` with the LocalExecutor and an
``airflow triggerer``, all subprocesses in their own process groups with a private AIRFLOW_HOME.
Airflow reads its configuration on first import, so the stack's configuration is put into the
environment here, before any test imports Airflow; tests import Airflow lazily and talk to the same
database in-process for assertions.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Stack, StatsdReceiver

HERE = Path(__file__).parent
EXECUTION_API_VERSION = "2026-11-30"
EXTRA_LIMIT = 1024
DEMO_DAGS = sorted((HERE.parents[1] / "examples" / "dags").glob("asset_emit_*.py"))
EXPECTED_DAGS = 22 + 7 * bool(DEMO_DAGS)
#: [core] asset_emit_max_chain_depth of the shared stack: small, so that test_emit_loop.py's loop stops
#: after a few runs (and large enough for its 3-step legitimate chain).
MAX_CHAIN_DEPTH = 3
#: The api-server's StatsD metrics (InfluxDB-style tags), for the loop-protection metric.
STATSD = StatsdReceiver().__enter__()


class EmitStack(Stack):
    """The shared stack, plus what the asset.emit() tests do with it."""

    extra_limit = EXTRA_LIMIT

    def token_for(self, ti_id: uuid.UUID | str) -> str:
        """Mint an execution token for a task instance, as the executor would."""
        from airflow.api_fastapi.execution_api.app import _jwt_generator

        return _jwt_generator().generate(extras={"sub": str(ti_id), "scope": "execution"})

    def emit(self, token: str, body: dict, version: str = EXECUTION_API_VERSION):
        import httpx

        return httpx.post(
            f"{self.api_url}/execution/asset-events",
            json=body,
            headers={"Authorization": f"Bearer {token}", "Airflow-API-Version": version},
            timeout=30,
        )

    def dag_run_state(self, dag_id: str, run_id: str) -> str | None:
        rows = self.query(
            "SELECT state FROM dag_run WHERE dag_id = %(d)s AND run_id = %(r)s", d=dag_id, r=run_id
        )
        return rows[0]["state"] if rows else None

    def wait_run_finished(self, dag_id: str, run_id: str, timeout: float = 60) -> str:
        return self.wait_for(
            lambda: (s := self.dag_run_state(dag_id, run_id)) in ("success", "failed") and s,
            timeout=timeout,
            what=f"{dag_id}/{run_id} to finish",
            logs=("scheduler",),
        )

    def task_logs(self, dag_id: str, run_id: str, chars: int = 4000) -> str:
        """The end of each task log of the run (for the message of a failing assertion)."""
        logs = sorted((self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}").rglob("*.log"))
        return "\n".join(f"==== {p}\n{p.read_text(errors='replace')[-chars:]}" for p in logs)

    def events(self, asset_name: str) -> list[dict]:
        from sqlalchemy import select

        from airflow.models.asset import AssetEvent, AssetModel
        from airflow.utils.session import create_session

        with create_session() as session:
            rows = session.scalars(
                select(AssetEvent)
                .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
                .where(AssetModel.name == asset_name)
                .order_by(AssetEvent.id)
            ).all()
            return [
                {
                    "id": e.id,
                    "extra": e.extra,
                    "partition_key": e.partition_key,
                    "source_dag_id": e.source_dag_id,
                    "source_task_id": e.source_task_id,
                    "source_run_id": e.source_run_id,
                    "source_map_index": e.source_map_index,
                }
                for e in rows
            ]

    def listener_records(self) -> list[dict]:
        return self.jsonl("listener.jsonl")


_HOME = Path(tempfile.mkdtemp(prefix="emit-"))
STACK = EmitStack(
    "t_emit",
    _HOME,
    # The Dag processor is started by the fixture, with debug logging (see there).
    components=("api-server", "scheduler", "triggerer"),
    dags=[HERE / "dags", *DEMO_DAGS],
    plugins=[HERE / "plugins"],
    out_var="EMIT_TEST_OUT",
    config={
        # Asset-triggered consumer runs are made by the scheduler's Dag-run creation, which
        # use_job_schedule=False (the harness's quick default) turns off.
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "True",
        "AIRFLOW__CORE__PARALLELISM": "8",
        "AIRFLOW__CORE__MAX_EMITTED_ASSET_EVENT_EXTRA_BYTES": str(EXTRA_LIMIT),
        "AIRFLOW__CORE__ASSET_EMIT_MAX_CHAIN_DEPTH": str(MAX_CHAIN_DEPTH),
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(STATSD.port),
        "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_SIZE": "10",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
        # A test holds one parse of emit_test_dags.py in the Dag processor for up to 150 s.
        "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "240",
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "240",
    },
)
#: The stack's settings, for the Airflow the tests import (and for test_emit_teams.py's api-server).
TEST_ENV = STACK.process_env()
os.environ.update(TEST_ENV)


def pytest_unconfigure(config: pytest.Config) -> None:
    STATSD.__exit__(None, None, None)
    if not os.environ.get("EMIT_TEST_KEEP_HOME"):
        shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def stack() -> Iterator[EmitStack]:
    """Database + api-server + dag-processor + scheduler (LocalExecutor) + triggerer; torn down at the end."""
    with STACK:
        # The Dag processor logs at debug level: its manager's "Queuing DagCallbackRequest" and
        # "Fetching callbacks from the database" lines are what
        # test_dag_callback_that_arrives_while_the_file_is_being_parsed synchronises on.
        STACK.start_component("dag-processor", config={"AIRFLOW__LOGGING__LOGGING_LEVEL": "DEBUG"})

        def dags_parsed() -> bool:
            resp = STACK.rest("GET", "/dags", params={"limit": 100})
            return resp.status_code == 200 and resp.json()["total_entries"] >= EXPECTED_DAGS

        STACK.wait_for(dags_parsed, timeout=240, what="the test Dags to be parsed", logs=("dag-processor",))
        # The tests import Airflow lazily; import it here, outside any test function's timeout.
        import airflow.models.taskinstance  # noqa: F401

        try:
            yield STACK
        finally:
            from airflow import settings

            if settings.engine is not None:
                settings.engine.dispose()


def _finished_ti(stack: EmitStack, dag_id: str) -> dict:
    run_id = stack.trigger(dag_id)
    stack.wait_run_finished(dag_id, run_id)
    (ti,) = stack.query(
        "SELECT id, dag_id, task_id, run_id FROM task_instance WHERE dag_id = %(d)s AND run_id = %(r)s",
        d=dag_id,
        r=run_id,
    )
    return {**ti, "id": str(ti["id"])}


@pytest.fixture(scope="session")
def seed_ti(stack: EmitStack) -> dict:
    """A finished task instance of emit_test_seed, whose id the route tests mint tokens for."""
    return _finished_ti(stack, "emit_test_seed")


@pytest.fixture(scope="session")
def other_seed_ti(stack: EmitStack) -> dict:
    """A finished task instance of a second Dag, emit_test_seed_other (another producer)."""
    return _finished_ti(stack, "emit_test_seed_other")
