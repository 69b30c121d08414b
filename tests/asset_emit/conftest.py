"""
Fixtures for the asset.emit() tests.

One real Airflow stack is shared by the whole module session: a private PostgreSQL database
(migrated with ``airflow db migrate``), an ``airflow api-server`` (Execution API + REST API),
an ``airflow dag-processor`` and an ``airflow scheduler`` with the LocalExecutor, all
subprocesses in their own process groups with a private AIRFLOW_HOME. Airflow reads its
configuration on first import, so the environment is set here, before any test imports it;
tests import Airflow lazily and talk to the same database in-process for assertions.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import harness

HERE = Path(__file__).parent
PG_ADMIN_URL = "postgresql://postgres:postgres@127.0.0.1:5432/postgres"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
EXECUTION_API_VERSION = "2026-11-30"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_HOME = Path(tempfile.mkdtemp(prefix="emit-"))
_OUT = _HOME / "out"
_OUT.mkdir()
DB_NAME = f"t_emit_{uuid.uuid4().hex[:10]}"
DB_URL = f"postgresql+psycopg2://postgres:postgres@127.0.0.1:5432/{DB_NAME}"
API_PORT = _free_port()
API_URL = f"http://127.0.0.1:{API_PORT}"
EXTRA_LIMIT = 1024

TEST_ENV = {
    "AIRFLOW_HOME": str(_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(_HOME / "dags"),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(_HOME / "plugins"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    "AIRFLOW__CORE__PARALLELISM": "8",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{API_URL}/execution/",
    "AIRFLOW__CORE__MAX_EMITTED_ASSET_EVENT_EXTRA_BYTES": str(EXTRA_LIMIT),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": DB_URL,
    "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_SIZE": "10",
    "AIRFLOW__API__HOST": "127.0.0.1",
    "AIRFLOW__API__PORT": str(API_PORT),
    "AIRFLOW__API__WORKERS": "1",
    "AIRFLOW__API_AUTH__JWT_SECRET": "emit-test-secret-" + uuid.uuid4().hex + uuid.uuid4().hex,
    "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(_HOME / "logs"),
    "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port()),
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
    # A test holds one parse of emit_test_dags.py in the Dag processor for up to 150 s.
    "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "240",
    "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "240",
    # Task processes wait longer for the api-server than the 5 s default: on a loaded 2-core
    # machine a task could otherwise fail before it starts (ReadTimeout in the LocalExecutor worker).
    "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
    "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN": "0.05",
    "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX": "0.2",
    "EMIT_TEST_OUT": str(_OUT),
}
os.environ.update(TEST_ENV)
shutil.copytree(HERE / "dags", _HOME / "dags")
DEMO_DAGS = sorted((HERE.parents[1] / "examples" / "dags").glob("asset_emit_*.py"))
for _demo in DEMO_DAGS:
    shutil.copy(_demo, _HOME / "dags" / _demo.name)
EXPECTED_DAGS = 12 + 4 * bool(DEMO_DAGS)
shutil.copytree(HERE / "plugins", _HOME / "plugins")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: end-to-end test with real Airflow processes (slow)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """
    Time only the test functions, not the shared stack's start.

    The session-scoped ``stack`` fixture (migration, api-server, Dags parsed; each step bounded
    by its own wait) is set up inside whichever test runs first; on a loaded machine that alone
    could use up that test's timeout.
    """
    for item in items:
        marker = item.get_closest_marker("timeout")
        if marker is not None and "func_only" not in marker.kwargs:
            item.add_marker(pytest.mark.timeout(*marker.args, **marker.kwargs, func_only=True), append=False)


def pytest_unconfigure(config: pytest.Config) -> None:
    if not os.environ.get("EMIT_TEST_KEEP_HOME"):
        shutil.rmtree(_HOME, ignore_errors=True)


_psql = harness.pg_admin_execute


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Stack:
    """Handles to the running Airflow stack and helpers to drive and inspect it."""

    api_url = API_URL
    out_dir = _OUT
    home = _HOME
    extra_limit = EXTRA_LIMIT

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}

    # -- processes -----------------------------------------------------------------------
    def start(self, name: str, *args: str) -> None:
        log = open(_HOME / f"{name}.log", "wb")
        self.procs[name] = subprocess.Popen(
            [AIRFLOW, *args],
            env={**os.environ, **TEST_ENV},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)

    def log_tail(self, name: str, lines: int = 60) -> str:
        path = _HOME / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    # -- REST / Execution API --------------------------------------------------------------
    def rest(self, method: str, path: str, **kwargs: Any):
        import httpx

        return httpx.request(method, f"{API_URL}/api/v2{path}", timeout=30, **kwargs)

    def token_for(self, ti_id: uuid.UUID | str) -> str:
        """Mint an execution token for a task instance, as the executor would."""
        from airflow.api_fastapi.execution_api.app import _jwt_generator

        return _jwt_generator().generate(extras={"sub": str(ti_id), "scope": "execution"})

    def emit(self, token: str, body: dict, version: str = EXECUTION_API_VERSION):
        import httpx

        return httpx.post(
            f"{API_URL}/execution/asset-events",
            json=body,
            headers={"Authorization": f"Bearer {token}", "Airflow-API-Version": version},
            timeout=30,
        )

    def trigger(self, dag_id: str) -> str:
        run_id = f"test__{dag_id}__{uuid.uuid4().hex[:8]}"
        resp = self.rest("POST", f"/dags/{dag_id}/dagRuns", json={"dag_run_id": run_id, "logical_date": None})
        assert resp.status_code == 200, resp.text
        return run_id

    # -- database --------------------------------------------------------------------------
    def dag_run_state(self, dag_id: str, run_id: str) -> str | None:
        from sqlalchemy import select

        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session

        with create_session() as session:
            return session.scalar(
                select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
            )

    def wait_run_finished(self, dag_id: str, run_id: str, timeout: float = 60) -> str:
        return wait_for(
            lambda: (s := self.dag_run_state(dag_id, run_id)) in ("success", "failed") and s,
            timeout,
            f"{dag_id}/{run_id} to finish",
        )

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
        path = _OUT / "listener.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """Database + api-server + dag-processor + scheduler (LocalExecutor) + triggerer; torn down at the end."""
    _psql(f'CREATE DATABASE "{DB_NAME}"')
    st = Stack()
    try:
        subprocess.run(
            [AIRFLOW, "db", "migrate"],
            env={**os.environ, **TEST_ENV},
            check=True,
            capture_output=True,
            timeout=600,
        )
        st.start("api-server", "api-server")
        st.start("dag-processor", "dag-processor")
        st.start("scheduler", "scheduler")
        st.start("triggerer", "triggerer")

        def api_up() -> bool:
            import httpx

            try:
                return httpx.get(f"{API_URL}/api/v2/monitor/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(api_up, 240, "the api-server")

        def dags_parsed() -> bool:
            resp = st.rest("GET", "/dags", params={"limit": 100})
            return resp.status_code == 200 and resp.json()["total_entries"] >= EXPECTED_DAGS

        try:
            wait_for(dags_parsed, 240, "the test Dags to be parsed")
        except BaseException:
            print(st.log_tail("dag-processor", 80))
            raise
        # The tests import Airflow lazily; import it here, outside any test function's timeout.
        import airflow.models.taskinstance  # noqa: F401

        yield st
    finally:
        st.stop()
        try:
            from airflow import settings

            if settings.engine is not None:
                settings.engine.dispose()
        finally:
            _psql(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')


def _finished_ti(stack: Stack, dag_id: str) -> dict:
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    run_id = stack.trigger(dag_id)
    stack.wait_run_finished(dag_id, run_id)
    with create_session() as session:
        ti = session.scalar(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        )
        return {"id": ti.id, "dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id}


@pytest.fixture(scope="session")
def seed_ti(stack: Stack) -> dict:
    """A finished task instance of emit_test_seed, whose id the route tests mint tokens for."""
    return _finished_ti(stack, "emit_test_seed")


@pytest.fixture(scope="session")
def other_seed_ti(stack: Stack) -> dict:
    """A finished task instance of a second Dag, emit_test_seed_other (another producer)."""
    return _finished_ti(stack, "emit_test_seed_other")
