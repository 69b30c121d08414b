"""
End to end (issue 14): a Celery worker lost as a whole is infra only when it is seen to restart.

One stack for the module: a private PostgreSQL database, a private ``redis-server`` (its own port,
so that dropping every client connection disturbs nobody else) as broker and result backend,
``airflow api-server``, ``dag-processor``, ``scheduler`` with the CeleryExecutor and
``airflow celery worker --celery-hostname restart-node``, each in its own process group.
``[scheduler] task_instance_heartbeat_timeout`` is 40 s, so the heartbeat path ends a lost try
quickly but never before the executor had its chance (it needs a few seconds after the restart).

The three tests run in file order on the same stack; each starts the worker when none runs:

* healthy: every Redis client connection is dropped under a running task (the worker reconnects);
  the task is not failed and succeeds on its only try;
* restart: the worker's whole process group (main process, pool child, supervisor, task process:
  a killed container) is SIGKILLed, then a worker with the same node name starts; try 1 is failed as
  ``infra`` within seconds of the restart with a reason naming the node and both incarnations, and
  with ``max_infra_retries = 1`` the ``retries=0`` task succeeds on try 2; no try-1 code ran after
  try 2 started;
* main process alone: the same, but only the worker's main process is SIGKILLed; its pool child
  dies with it (parent-death signal) and the task process with the pool child, before the restart;
* no restart: the worker is SIGKILLed and never comes back; the try stays running until the
  heartbeat timeout, which ends it as ``unknown``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

import lines  # noqa: E402
from _helpers import core_supports_failure_cause  # noqa: E402
from lines import LIVE_TRY  # noqa: E402
from harness import AirflowEnv, free_port, pg_available, pg_database, wait_for  # noqa: E402
from test_celery_e2e import aip122_installed, query  # noqa: E402

VENV = Path(sys.executable).parent.parent
DAG_ID, TASK_ID = "aip97_celery_worker_restart", "hold"
NODE = "restart-node"
HEARTBEAT_TIMEOUT = 40

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.requires_feature("aip-97-celery", "aip-122"),
    pytest.mark.skipif(not core_supports_failure_cause(), reason="needs the AIP-97 core to record causes"),
    pytest.mark.skipif(not aip122_installed(), reason="AIP-122 ([core] max_infra_retries) is not installed"),
]


@contextlib.contextmanager
def private_redis(home: Path):
    """Run a ``redis-server`` of our own on a free port; yield (port, client)."""
    import redis

    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=(home / "redis.log").open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        wait_for(client.ping, timeout=20, interval=0.2, what="private redis-server")
        yield port, client
    finally:
        client.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


class Stack:
    def __init__(self, env: AirflowEnv, db_url: str, redis_client, out: Path):
        self.env, self.db_url, self.redis, self.out = env, db_url, redis_client, out
        self.worker_runs = 0

    # --- the worker -------------------------------------------------------------------------
    def worker(self):
        return self.env.procs.get(self.worker_name)

    @property
    def worker_name(self) -> str:
        return f"celery-worker-{self.worker_runs}"

    def start_worker(self) -> float:
        self.worker_runs += 1
        started = time.time()
        self.env.start(
            "celery", "worker", "--concurrency", "1", "--celery-hostname", NODE, name=self.worker_name
        )
        return started

    def ensure_worker(self) -> None:
        proc = self.worker()
        if proc is None or proc.poll() is not None:
            self.start_worker()

    def try_processes(self, run_id: str) -> dict[str, int]:
        """The pool child running the run's try (from its Celery STARTED meta) and its task process."""
        (ti,) = query(
            self.db_url,
            "SELECT external_executor_id FROM task_instance "
            f"WHERE dag_id = %(d)s AND run_id = %(r)s AND {LIVE_TRY}",
            d=DAG_ID,
            r=run_id,
        )
        meta = json.loads(self.redis.get(f"celery-task-meta-{ti['external_executor_id']}"))
        task_pid = next(r["pid"] for r in self.records(run_id) if r["try"] == 1)
        return {"pool child": meta["result"]["pid"], "task process": task_pid}

    def kill_worker(self, run_id: str, *, whole_group: bool = True) -> None:
        """
        SIGKILL the worker's whole process group at once, as a killed container; or only its main
        process, and check that the pool child running the try and its task process die with it.
        """
        import psutil

        proc = self.worker()
        processes = self.try_processes(run_id)
        assert all(psutil.pid_exists(pid) for pid in processes.values()), processes

        def alive() -> dict[str, int]:
            left = {}
            for name, pid in processes.items():
                with contextlib.suppress(psutil.Error):
                    if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                        left[name] = pid
            return left

        if whole_group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        try:
            wait_for(lambda: not alive(), timeout=15, interval=0.1, what="the try's processes gone")
        except TimeoutError:
            raise AssertionError(f"still running after the worker's main process died: {alive()}") from None
        # What is left of the group are the worker command's side processes (log server, bundle
        # cleanup), started before the Celery worker; a container would take them along.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    def announcement(self) -> dict | None:
        raw = self.redis.get(f"airflow-celery-worker-incarnation-celery@{NODE}")
        return json.loads(raw) if raw else None

    # --- runs -------------------------------------------------------------------------------
    def trigger(self) -> str:
        run_id = f"manual__{uuid.uuid4().hex[:8]}"
        self.env.airflow("dags", "trigger", DAG_ID, "--run-id", run_id, timeout=120)
        return run_id

    def records(self, run_id: str) -> list[dict]:
        path = self.out / f"{run_id}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def wait_try_running(self, run_id: str, try_number: int = 1) -> None:
        wait_for(
            lambda: any(r["try"] == try_number and r.get("start") for r in self.records(run_id)),
            timeout=120,
            what=f"try {try_number} of {run_id} running",
        )

    def release(self, run_id: str) -> None:
        (self.out / f"{run_id}.release").touch()

    def tries(self, run_id: str) -> list[dict]:
        cols = "try_number, state, failure_cause, failure_reason, start_date, end_date"
        where = "WHERE dag_id = %(d)s AND run_id = %(r)s"
        history = query(
            self.db_url,
            f"SELECT {cols} FROM {lines.PAST_TRIES} {where} ORDER BY try_number",
            d=DAG_ID,
            r=run_id,
        )
        live = query(self.db_url, f"SELECT {cols} FROM task_instance {where} AND {LIVE_TRY}", d=DAG_ID, r=run_id)
        return history + live

    def wait_final(self, run_id: str, timeout: float) -> list[dict]:
        try:
            return wait_for(
                lambda: (t := self.tries(run_id)) and t[-1]["state"] in ("success", "failed") and t,
                timeout=timeout,
                what=f"task instance of {run_id} finished",
            )
        except TimeoutError:
            for name in ("scheduler", self.worker_name):
                print(f"--- {name} ---\n{self.env.log_text(name)[-6000:]}")
            raise


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    if not pg_available():
        pytest.skip("PostgreSQL from .ci/services.sh is not running")
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    home = tmp_path_factory.mktemp("celery-restart")
    out = home / "out"
    out.mkdir()
    port = free_port()
    with private_redis(home) as (redis_port, redis_client), pg_database("t_prov_celrst") as db_url:
        url = f"redis://127.0.0.1:{redis_port}/0"
        extra_env = {
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": url,
            "AIRFLOW__CELERY__RESULT_BACKEND": url,
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "1",
            "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": "celrst-" + uuid.uuid4().hex,
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT),
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
            "AIRFLOW__CORE__MAX_INFRA_RETRIES": "1",
            "AIP97CEL_OUT": str(out),
        }
        env = AirflowEnv(VENV, home, db_url=db_url, extra_env=extra_env)
        shutil.copy(HERE / "dags" / f"{DAG_ID}.py", env.dags_folder)
        try:
            env.airflow("db", "migrate", timeout=300)
            env.start("api-server")
            env.start("dag-processor")
            env.start("scheduler")
            s = Stack(env, db_url, redis_client, out)
            s.start_worker()
            wait_for(
                lambda: query(db_url, "SELECT 1 FROM dag WHERE dag_id = %(d)s", d=DAG_ID),
                timeout=120,
                what="dag parsed",
            )
            yield s
        finally:
            env.stop()


@pytest.mark.timeout(150)
def test_healthy_worker_that_reconnects_keeps_its_task(stack):
    stack.ensure_worker()
    run_id = stack.trigger()
    stack.wait_try_running(run_id)
    before = stack.announcement()
    # Drop every client connection of the private Redis: the worker (and the executor) reconnect.
    dropped = stack.redis.execute_command("CLIENT", "KILL", "SKIPME", "yes")
    assert dropped >= 1
    wait_for(
        lambda: "Connection to broker lost" in stack.env.log_text(stack.worker_name),
        timeout=30,
        what="the worker noticed the dropped connection",
    )
    # Several restart checks of the executor (every 5 s) see the worker after it reconnected.
    time.sleep(12)
    assert stack.tries(run_id)[-1]["state"] == "running"
    assert stack.announcement() == before, "a reconnect is not a new incarnation"
    stack.release(run_id)
    tries = stack.wait_final(run_id, timeout=60)
    assert [(t["try_number"], t["state"], t["failure_cause"]) for t in tries] == [(1, "success", None)]


def restart_and_check(stack: Stack, *, whole_group: bool) -> None:
    stack.ensure_worker()
    run_id = stack.trigger()
    stack.wait_try_running(run_id)
    old = stack.announcement()
    assert old is not None, "the worker did not announce its incarnation"
    stack.kill_worker(run_id, whole_group=whole_group)
    killed_at = time.time()
    stack.start_worker()
    wait_for(
        lambda: (a := stack.announcement()) and a["started_at"] != old["started_at"],
        timeout=60,
        what="new incarnation",
    )
    new = stack.announcement()
    try1 = wait_for(
        lambda: (t := stack.tries(run_id)) and t[0]["state"] not in ("running", "queued", None) and t[0],
        timeout=HEARTBEAT_TIMEOUT,
        what="try 1 ended",
    )
    assert try1["failure_cause"] == "infra", (try1, stack.env.log_text("scheduler")[-4000:])
    reason = try1["failure_reason"]
    assert f"Celery worker celery@{NODE} restarted" in reason
    assert f"pid {old['pid']}" in reason and f"pid {new['pid']}" in reason, reason
    assert "start announcement" in reason
    detected_after = try1["end_date"].timestamp() - new["started_at"]
    print(
        f"try 1 failed {detected_after:.1f}s after the new incarnation started "
        f"({try1['end_date'].timestamp() - killed_at:.1f}s after the kill)"
    )
    # The reason above proves that the restart evidence ended try 1; this bounds how fast. Idle it is
    # 8-12 s, most of it the new worker's own start-up (counted from its process start); the bound
    # leaves room for a loaded CI machine (both lines' suites at once).
    assert detected_after < 30, detected_after

    tries = stack.wait_final(run_id, timeout=90)
    assert [(t["try_number"], t["state"]) for t in tries] == [(1, "failed"), (2, "success")]
    records = stack.records(run_id)
    try2_start = [r["t"] for r in records if r["try"] == 2 and r.get("start")]
    assert len(try2_start) == 1
    last_try1 = max(r["t"] for r in records if r["try"] == 1)
    assert last_try1 < killed_at
    assert last_try1 < tries[-1]["start_date"].timestamp() and last_try1 < try2_start[0]


@pytest.mark.timeout(150)
def test_restarted_worker_fails_the_old_try_as_infra_and_it_succeeds_on_try_2(stack):
    restart_and_check(stack, whole_group=True)


@pytest.mark.timeout(150)
def test_worker_main_process_killed_alone_takes_its_pool_and_task_with_it(stack):
    """Only the main process is SIGKILLed: its pool child and the task process die with it."""
    restart_and_check(stack, whole_group=False)


@pytest.mark.timeout(150)
def test_worker_that_never_comes_back_is_left_to_the_heartbeat_timeout(stack):
    stack.ensure_worker()
    run_id = stack.trigger()
    stack.wait_try_running(run_id)
    stack.kill_worker(run_id)
    killed_at = time.time()
    tries = stack.wait_final(run_id, timeout=HEARTBEAT_TIMEOUT + 60)
    assert [(t["try_number"], t["state"]) for t in tries] == [(1, "failed")]
    assert tries[0]["failure_cause"] == "unknown", tries[0]
    assert "restarted" not in (tries[0]["failure_reason"] or "")
    # Not before the heartbeat timeout: nothing reported the lost worker earlier.
    last_heartbeat_window = tries[0]["end_date"].timestamp() - killed_at
    assert last_heartbeat_window > HEARTBEAT_TIMEOUT - 10, last_heartbeat_window
