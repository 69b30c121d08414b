"""
The stack of the retry-rules end-to-end tests: real api-server, dag-processor and scheduler on PostgreSQL.

:func:`airflow_stack` starts what ``tests/harness.py`` provides (``AirflowEnv``, ``pg_database``,
``wait_for``) with this directory's Dags, listener plugin and ``pythonpath/`` (the storm executor),
and stops everything on exit. Each test module starts its own stack with its own settings.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from harness import AirflowEnv, free_port, pg_available, pg_database, wait_for  # noqa: E402

VENV = Path(sys.executable).parent.parent


def _http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status == 200


class Stack:
    """A running stack: its environment, database and output directory."""

    def __init__(self, env: AirflowEnv, db_url: str, out: Path, extra_env: dict[str, str]) -> None:
        self.env = env
        self.db_url = db_url
        self.out = out
        self.extra_env = extra_env

    def query(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        import psycopg2
        import psycopg2.extras

        conn = psycopg2.connect(self.db_url.replace("postgresql+psycopg2://", "postgresql://"))
        try:
            with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
                cur.execute(sql, params)
                return [dict(r) for r in cur.fetchall()] if cur.description else []
        finally:
            conn.close()

    def jsonl(self, name: str) -> list[dict[str, Any]]:
        path = self.out / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def trigger(self, dag_id: str) -> None:
        wait_for(
            lambda: self.query("SELECT 1 FROM dag WHERE dag_id = %(d)s", d=dag_id),
            timeout=120,
            what=f"dag {dag_id} parsed",
        )
        self.env.airflow("dags", "trigger", dag_id, timeout=120)

    def rest(self, *paths: str) -> list[Any]:
        """GET each ``/api/v2/<path>`` through the real REST app (SimpleAuthManager, all admins)."""
        code = f"""
import json
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app
client = TestClient(create_app())
print(json.dumps([client.get("/api/v2/" + p).json() for p in {list(paths)!r}]))
"""
        out = self.env.run_python(code, timeout=180)
        return json.loads(out.stdout.strip().splitlines()[-1])

    def dump_logs(self) -> None:
        for name in list(self.env.procs):
            print(f"==== {name}\n", self.env.log_text(name)[-6000:])

    def start_scheduler(self, name: str, extra_env: dict[str, str]) -> AirflowEnv:
        """Start a scheduler with this stack's settings plus ``extra_env``; the caller stops it."""
        env = AirflowEnv(
            VENV,
            self.env.home,
            db_url=self.db_url,
            dags_folder=self.env.dags_folder,
            extra_env={**self.extra_env, **extra_env},
        )
        env.start("scheduler", name=name)
        return env


@contextlib.contextmanager
def airflow_stack(
    tmp: Path, *, dag_files: list[str], extra_env: dict[str, str], start_scheduler: bool = True
) -> Iterator[Stack]:
    """Start api-server, dag-processor and (unless told not to) a scheduler; stop all on exit."""
    if not pg_available():
        pytest.fail("PostgreSQL at 127.0.0.1:5432 is not reachable; run .ci/services.sh")
    out = tmp / "out"
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env_vars = {
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API_AUTH__JWT_SECRET": "retry-rules-" + uuid.uuid4().hex,
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN": "0.05",
        "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX": "0.2",
        "PYTHONPATH": str(HERE / "pythonpath"),
        "RR_OUT": str(out),
        **extra_env,
    }
    with pg_database("t_retry_rules") as db_url:
        env = AirflowEnv(VENV, tmp / "home", db_url=db_url, extra_env=env_vars)
        for name in dag_files:
            shutil.copy(HERE / "dags" / name, env.dags_folder)
        shutil.copytree(HERE / "plugins", env.home / "plugins", dirs_exist_ok=True)
        stack = Stack(env, db_url, out, env_vars)
        try:
            env.airflow("db", "migrate", timeout=300)
            env.start("api-server")
            wait_for(
                lambda: _http_ok(f"http://127.0.0.1:{port}/execution/health"),
                timeout=180,
                what="api-server health",
            )
            env.start("dag-processor")
            if start_scheduler:
                env.start("scheduler")
            yield stack
        except BaseException:
            stack.dump_logs()
            raise
        finally:
            env.stop()
