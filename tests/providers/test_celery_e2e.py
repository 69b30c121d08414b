"""
End to end: a real Celery worker loses the pool child running a task; the scheduler records infra.

One stack for the module: a private PostgreSQL database, Redis (its own database number) as broker
and result backend, ``airflow api-server``, ``airflow dag-processor``, ``airflow scheduler`` with
the CeleryExecutor and ``airflow celery worker``, each in its own process group (tests/harness.py).
The task's first try SIGKILLs its supervisor, i.e. the Celery pool child, and keeps running task code
for 30 s; Celery records ``WorkerLostError`` and the executor reports it. The task process must die
with its supervisor, so no try-1 code runs once try 2 has started.

When AIP-122 is installed (``[core] max_infra_retries`` exists in config.yml) the stack runs with
``max_infra_retries = 1`` and the task, which has ``retries=0``, must succeed on its second try.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

import lines  # noqa: E402
from _helpers import REDIS_DB_E2E, core_supports_failure_cause  # noqa: E402
from lines import LIVE_TRY  # noqa: E402
from harness import AirflowEnv, free_port, pg_available, pg_database, wait_for  # noqa: E402

pytestmark = pytest.mark.requires_feature("aip-97-celery")

VENV = Path(sys.executable).parent.parent
REDIS_DB = REDIS_DB_E2E  # this line's own Redis database (the other line's suite may run at once)
DAG_ID, TASK_ID = "aip97_celery_lost_worker", "lose_worker"
HEARTBEAT_TIMEOUT = 300  # far beyond the test: a failure seen within seconds came from the executor


def aip122_installed() -> bool:
    import yaml

    import airflow

    config_yml = Path(airflow.__file__).parent / "config_templates" / "config.yml"
    core = yaml.safe_load(config_yml.read_text())["core"]["options"]
    return "max_infra_retries" in core


def query(db_url: str, sql: str, **params):
    import psycopg2
    import psycopg2.extras

    conn = psycopg2.connect(db_url.replace("postgresql+psycopg2://", "postgresql://"))
    try:
        with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute(sql, params)
            return [dict(r) for r in cur.fetchall()]
    finally:
        conn.close()


@pytest.fixture(scope="module")
def celery_run(tmp_path_factory):
    """Run the Dag once on the Celery stack; yield (db_url, env) once the task instance is done."""
    if not pg_available():
        pytest.skip("PostgreSQL from .ci/services.sh is not running")
    import redis

    broker = redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB)
    broker.ping()
    broker.flushdb()
    home = tmp_path_factory.mktemp("aip97celery")
    out = home / "out"
    out.mkdir()
    port = free_port()
    extra_env = {
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
        "AIRFLOW__CELERY__RESULT_BACKEND": f"redis://127.0.0.1:6379/{REDIS_DB}",
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "1",
        "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API_AUTH__JWT_SECRET": "aip97prov-" + uuid.uuid4().hex,
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT),
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
        "AIP97CEL_OUT": str(out),
    }
    if aip122_installed():
        extra_env["AIRFLOW__CORE__MAX_INFRA_RETRIES"] = "1"
    with pg_database("t_prov_celery") as db_url:
        env = AirflowEnv(VENV, home, db_url=db_url, extra_env=extra_env)
        shutil.copy(HERE / "dags" / f"{DAG_ID}.py", env.dags_folder)
        try:
            env.airflow("db", "migrate", timeout=300)
            env.start("api-server")
            env.start("dag-processor")
            env.start("scheduler")
            env.start("celery", "worker", "--concurrency", "1", name="celery-worker")
            wait_for(
                lambda: query(db_url, "SELECT 1 FROM dag WHERE dag_id = %(d)s", d=DAG_ID),
                timeout=120,
                what="dag parsed",
            )
            env.airflow("dags", "trigger", DAG_ID, timeout=120)
            final = {"success", "failed"}
            try:
                wait_for(
                    lambda: [
                        r
                        for r in query(
                            db_url,
                            f"SELECT state FROM task_instance WHERE dag_id = %(d)s AND {LIVE_TRY}",
                            d=DAG_ID,
                        )
                        if r["state"] in final
                    ],
                    timeout=180,
                    what="task instance finished",
                )
            except TimeoutError:
                for name in ("scheduler", "celery-worker"):
                    print(f"--- {name} ---\n{env.log_text(name)[-5000:]}")
                raise
            # A try-1 process that outlived its pool child would keep writing for up to 30 s.
            time.sleep(3)
            yield db_url, env
        finally:
            env.stop()
            broker.flushdb()


def tries(db_url: str) -> list[dict]:
    """Every try of the task instance: archived tries first, then the live row."""
    cols = "try_number, state, failure_cause, failure_reason"
    history = query(
        db_url, f"SELECT {cols} FROM {lines.PAST_TRIES} WHERE dag_id = %(d)s ORDER BY try_number", d=DAG_ID
    )
    live = query(db_url, f"SELECT {cols} FROM task_instance WHERE dag_id = %(d)s AND {LIVE_TRY}", d=DAG_ID)
    return history + live


@pytest.mark.e2e
@pytest.mark.timeout(420)
@pytest.mark.skipif(not core_supports_failure_cause(), reason="needs the AIP-97 core to record causes")
def test_lost_worker_child_is_infra(celery_run):
    db_url, env = celery_run
    first = tries(db_url)[0]
    assert first["try_number"] == 1
    assert first["failure_cause"] == "infra", (first, env.log_text("scheduler")[-3000:])
    assert first["failure_reason"].startswith("Celery worker child process lost: Worker exited prematurely")
    assert "signal 9 (SIGKILL)" in first["failure_reason"]
    if not aip122_installed():
        assert [t["state"] for t in tries(db_url)] == ["failed"]  # retries=0: the try is final


@pytest.mark.e2e
@pytest.mark.timeout(420)
@pytest.mark.requires_feature("aip-122")
@pytest.mark.skipif(not aip122_installed(), reason="AIP-122 ([core] max_infra_retries) is not installed")
def test_infra_retry_succeeds_on_second_try(celery_run):
    db_url, _ = celery_run
    all_tries = tries(db_url)
    assert [(t["try_number"], t["failure_cause"]) for t in all_tries][:1] == [(1, "infra")]
    assert all_tries[-1]["try_number"] == 2
    assert all_tries[-1]["state"] == "success"


@pytest.mark.e2e
@pytest.mark.timeout(420)
@pytest.mark.requires_feature("aip-122")
@pytest.mark.skipif(not aip122_installed(), reason="AIP-122 ([core] max_infra_retries) is not installed")
def test_lost_pool_child_stops_task_code_before_try_2(celery_run):
    """Issue 9, part 1: by the time try 1 is recorded as infra and retried, its task code has stopped."""
    db_url, env = celery_run
    assert [t["try_number"] for t in tries(db_url)] == [1, 2]
    path = Path(env.env["AIP97CEL_OUT"]) / "copy.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    try1 = [r["t"] for r in records if r["try"] == 1]
    try2_start = [r["t"] for r in records if r["try"] == 2 and r.get("start")]
    assert any(r["try"] == 1 and r.get("before_kill") for r in records), "try 1 never ran its task code"
    assert len(try2_start) == 1, records[-5:]
    live = query(db_url, f"SELECT start_date FROM task_instance WHERE dag_id = %(d)s AND {LIVE_TRY}", d=DAG_ID)[0]
    last_try1 = max(try1)
    assert last_try1 < live["start_date"].timestamp(), (
        f"try 1 was still running task code {last_try1 - live['start_date'].timestamp():.1f}s "
        "after try 2 started"
    )
    assert last_try1 < try2_start[0]
