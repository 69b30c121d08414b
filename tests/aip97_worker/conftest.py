"""
Fixtures for the AIP-97 worker-side tests: one real Airflow stack for the whole session.

A private PostgreSQL database (``airflow db migrate``), an ``airflow api-server`` (Execution API), an
``airflow dag-processor`` and an ``airflow scheduler`` with the LocalExecutor, all started through
``tests/harness.py`` in their own process groups with a private AIRFLOW_HOME. The heartbeat timeout
is 300 s, so any failure detected within seconds was detected by the path under test, not by it.
"""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

import lines  # noqa: E402
from harness import AirflowEnv, free_port, pg_available, pg_database, wait_for  # noqa: E402

VENV = Path(sys.executable).parent.parent
DEMO_DAG = HERE.parents[1] / "examples" / "dags" / "aip97_failure_causes.py"
HEARTBEAT_TIMEOUT = 300


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: end-to-end test with real Airflow processes (slow)")


def _http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status == 200


class Stack:
    """The running stack plus helpers to query its database."""

    heartbeat_timeout = HEARTBEAT_TIMEOUT

    def __init__(self, env: AirflowEnv, db_url: str, out: Path) -> None:
        self.env = env
        self.db_url = db_url
        self.out = out

    def query(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        import psycopg2
        import psycopg2.extras

        dsn = self.db_url.replace("postgresql+psycopg2://", "postgresql://")
        conn = psycopg2.connect(dsn)
        try:
            with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
                cur.execute(sql, params)
                return [dict(r) for r in cur.fetchall()] if cur.description else []
        finally:
            conn.close()

    def ti(self, dag_id: str, task_id: str) -> dict[str, Any] | None:
        rows = self.query(
            f"SELECT * FROM task_instance WHERE dag_id = %(d)s AND task_id = %(t)s AND {lines.LIVE_TRY}",
            d=dag_id,
            t=task_id,
        )
        return rows[0] if rows else None

    def wait_ti_state(self, dag_id: str, task_id: str, states: set[str], timeout: float) -> dict[str, Any]:
        def done():
            row = self.ti(dag_id, task_id)
            return row if row and row["state"] in states else None

        try:
            return wait_for(done, timeout=timeout, what=f"{dag_id}.{task_id} in {states}")
        except TimeoutError:
            print(self.env.log_text("scheduler")[-6000:])
            raise

    def jsonl(self, name: str) -> list[dict[str, Any]]:
        path = self.out / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def trigger(self, dag_id: str) -> None:
        wait_for(
            lambda: self.query("SELECT 1 FROM dag WHERE dag_id = %(d)s", d=dag_id),
            timeout=90,
            what=f"dag {dag_id} parsed",
        )
        self.env.airflow("dags", "trigger", dag_id, timeout=120)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if not pg_available():
        pytest.skip("PostgreSQL from .ci/services.sh is not running")
    home = tmp_path_factory.mktemp("aip97w")
    out = home / "out"
    out.mkdir()
    port = free_port()
    with pg_database("t_aip97w") as db_url:
        env = AirflowEnv(
            VENV,
            home,
            db_url=db_url,
            extra_env={
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "8",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API_AUTH__JWT_SECRET": "aip97w-" + uuid.uuid4().hex,
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT),
                "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
                "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN": "0.05",
                "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX": "0.2",
                "AIP97W_OUT": str(out),
            },
        )
        shutil.copytree(HERE / "dags", env.dags_folder, dirs_exist_ok=True)
        shutil.copy(DEMO_DAG, env.dags_folder)
        shutil.copytree(HERE / "plugins", home / "plugins", dirs_exist_ok=True)
        try:
            env.airflow("db", "migrate", timeout=300)
            env.start("api-server")
            wait_for(
                lambda: _http_ok(f"http://127.0.0.1:{port}/execution/health"),
                timeout=180,
                what="api-server health",
            )
            env.start("dag-processor")
            env.start("scheduler")
            s = Stack(env, db_url, out)
            s.trigger("aip97w_causes")
            yield s
        finally:
            env.stop()
