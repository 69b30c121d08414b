"""
End to end (issue 14): a Celery worker lost as a whole is infra only when it is seen to restart.

On the directory's ``celery_stack`` (conftest.py: private PostgreSQL database, private
``redis-server`` as broker and result backend -- dropping every client connection disturbs nobody
else --, ``airflow api-server`` and ``dag-processor``) this module runs its own ``scheduler`` with
the CeleryExecutor and ``airflow celery worker --celery-hostname restart-node``, each in its own
process group. ``[scheduler] task_instance_heartbeat_timeout`` is 40 s, so the heartbeat path ends a
lost try quickly but never before the executor had its chance (it needs a few seconds after the
restart).

The tests run in file order on the same stack; each starts the worker when none runs:

* healthy: every Redis client connection is dropped under a running task (the worker reconnects);
  the task is not failed and succeeds on its only try;
* restart: the worker's whole process group (main process, pool child, supervisor, task process:
  a killed container) is SIGKILLed, then a worker with the same node name starts; try 1 is failed as
  ``infra`` by the executor's restart evidence, with a reason naming the node and both incarnations,
  and with ``max_infra_retries = 1`` the ``retries=0`` task succeeds on try 2; no try-1 code ran
  after try 2 started (how fast: ``benchmarks/celery_worker_restart.py``);
* main process alone: the same, but only the worker's main process is SIGKILLed; its pool child
  dies with it (parent-death signal) and the task process with the pool child, before the restart;
* no restart: the worker is SIGKILLed and never comes back; the try stays running until the
  heartbeat timeout, which ends it as ``unknown`` (the scheduler's heartbeat path, by its reason).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import uuid

import pytest
from _helpers import aip122_installed, core_supports_failure_cause
from harness import Stack, failure_lines
from lines import LIVE_TRY, PAST_TRIES

DAG_ID, TASK_ID = "aip97_celery_worker_restart", "hold"
NODE = "restart-node"
HEARTBEAT_TIMEOUT = 40
SCHEDULER = "scheduler-restart"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.requires_feature("aip-97-celery", "aip-122"),
    pytest.mark.skipif(not core_supports_failure_cause(), reason="needs the AIP-97 core to record causes"),
    pytest.mark.skipif(not aip122_installed(), reason="AIP-122 ([core] max_infra_retries) is not installed"),
]


class Restarts:
    """The shared Celery stack, this module's scheduler and its worker (restarted under one node name)."""

    def __init__(self, stack: Stack):
        self.stack = stack
        self.redis = stack.redis()
        self.worker_runs = 0

    # --- the worker -------------------------------------------------------------------------
    def worker(self):
        return self.stack.env.procs.get(self.worker_name)

    @property
    def worker_name(self) -> str:
        return f"celery-worker-{self.worker_runs}"

    def start_worker(self) -> float:
        self.worker_runs += 1
        started = time.time()
        self.stack.start_worker(self.worker_name, "--celery-hostname", NODE)
        return started

    def ensure_worker(self) -> None:
        proc = self.worker()
        if proc is None or proc.poll() is not None:
            self.start_worker()

    def try_processes(self, run_id: str) -> dict[str, int]:
        """The pool child running the run's try (from its Celery STARTED meta) and its task process."""
        (ti,) = self.stack.query(
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
            self.stack.wait_for(lambda: not alive(), timeout=15, interval=0.1, what="the try's processes gone")
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
        return self.stack.trigger(DAG_ID, run_id=f"manual__{uuid.uuid4().hex[:8]}")

    def records(self, run_id: str) -> list[dict]:
        return self.stack.jsonl(f"{run_id}.jsonl")

    def wait_try_running(self, run_id: str, try_number: int = 1) -> None:
        self.stack.wait_for(
            lambda: any(r["try"] == try_number and r.get("start") for r in self.records(run_id)),
            timeout=120,
            what=f"try {try_number} of {run_id} running",
        )

    def release(self, run_id: str) -> None:
        (self.stack.out / f"{run_id}.release").touch()

    def tries(self, run_id: str) -> list[dict]:
        cols = "try_number, state, failure_cause, failure_reason, start_date, end_date"
        where = "WHERE dag_id = %(d)s AND run_id = %(r)s"
        history = self.stack.query(
            f"SELECT {cols} FROM {PAST_TRIES} {where} ORDER BY try_number", d=DAG_ID, r=run_id
        )
        live = self.stack.query(
            f"SELECT {cols} FROM task_instance {where} AND {LIVE_TRY}", d=DAG_ID, r=run_id
        )
        return history + live

    def wait_final(self, run_id: str, timeout: float) -> list[dict]:
        return self.stack.wait_for(
            lambda: (t := self.tries(run_id)) and t[-1]["state"] in ("success", "failed") and t,
            timeout=timeout,
            what=f"task instance of {run_id} finished",
            logs=(SCHEDULER, self.worker_name),
        )

    def announcement_reads(self) -> list[float]:
        """When the executor read the worker announcements (its restart checks), from now on.

        Followed on the private Redis's MONITOR stream; stopped with ``stop_reading()``.
        """
        reads: list[float] = []
        monitor = self.redis.monitor()
        monitor.__enter__()
        self._monitor = monitor

        def follow() -> None:
            with contextlib.suppress(Exception):
                while True:
                    command = monitor.next_command()
                    text = command.get("command", "")
                    if text.startswith("MGET") and "airflow-celery-worker-incarnation-" in text:
                        reads.append(time.time())

        threading.Thread(target=follow, daemon=True).start()
        return reads

    def stop_reading(self) -> None:
        with contextlib.suppress(Exception):
            self._monitor.connection.disconnect()


@pytest.fixture(scope="module")
def stack(celery_stack: Stack):
    celery_stack.start_component(
        "scheduler",
        name=SCHEDULER,
        config={
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT),
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
        },
    )
    restarts = Restarts(celery_stack)
    restarts.start_worker()
    try:
        yield restarts
    finally:
        celery_stack.stop(restarts.worker_name)
        celery_stack.stop(SCHEDULER)


@pytest.mark.timeout(150)
def test_healthy_worker_that_reconnects_keeps_its_task(stack):
    stack.ensure_worker()
    run_id = stack.trigger()
    stack.wait_try_running(run_id)
    before = stack.announcement()
    # Drop every client connection of the private Redis: the worker (and the executor) reconnect.
    dropped = stack.redis.execute_command("CLIENT", "KILL", "SKIPME", "yes")
    assert dropped >= 1
    stack.stack.wait_for(
        lambda: "Connection to broker lost" in stack.stack.log_text(stack.worker_name),
        timeout=30,
        what="the worker noticed the dropped connection",
    )
    # Two restart checks of the executor (it reads the announcements once a second at most) see the
    # worker after it reconnected: follow its reads on the private Redis.
    reads = stack.announcement_reads()
    try:
        stack.stack.wait_for(
            lambda: len(reads) >= 2, timeout=60, what="two restart checks of the executor", logs=(SCHEDULER,)
        )
    finally:
        stack.stop_reading()
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
    stack.stack.wait_for(
        lambda: (a := stack.announcement()) and a["started_at"] != old["started_at"],
        timeout=60,
        interval=0.1,
        what="new incarnation",
    )
    announced_at = time.time()
    new = stack.announcement()
    try1 = stack.stack.wait_for(
        lambda: (t := stack.tries(run_id)) and t[0]["state"] not in ("running", "queued", None) and t[0],
        timeout=HEARTBEAT_TIMEOUT,
        what="try 1 ended",
    )
    assert try1["failure_cause"] == "infra", (try1, stack.stack.log_text(SCHEDULER)[-4000:])
    reason = try1["failure_reason"]
    assert f"Celery worker celery@{NODE} restarted" in reason
    assert f"pid {old['pid']}" in reason and f"pid {new['pid']}" in reason, reason
    assert "start announcement" in reason
    # The reason above proves that the restart evidence ended try 1 (how fast is a figure of
    # benchmarks/celery_worker_restart.py and benchmarks/celery_worker_restart_containers.py, not a
    # bound here: issue 39's targets are 5 s for the detection and 10 s to try 2 running).
    detection = try1["end_date"].timestamp() - announced_at
    print(
        f"try 1 failed {detection:.1f}s after the new incarnation announced itself, "
        f"{try1['end_date'].timestamp() - new['started_at']:.1f}s after it started "
        f"({try1['end_date'].timestamp() - killed_at:.1f}s after the kill)"
    )

    tries = stack.wait_final(run_id, timeout=90)
    assert [(t["try_number"], t["state"]) for t in tries] == [(1, "failed"), (2, "success")]
    records = stack.records(run_id)
    try2_start = [r["t"] for r in records if r["try"] == 2 and r.get("start")]
    assert len(try2_start) == 1
    print(
        f"try 2 running {try2_start[0] - announced_at:.1f}s after the announcement: retry delay and "
        f"queueing {tries[1]['start_date'].timestamp() - try1['end_date'].timestamp():.1f}s to its start_date"
    )
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
    # Nothing reported the lost worker: the scheduler's heartbeat path ended the try (its reason and
    # its one failure line say so), not the executor.
    assert "Heartbeat timeout" in tries[0]["failure_reason"], tries[0]
    (line,) = stack.stack.wait_for(
        lambda: [
            r
            for r in failure_lines(stack.stack.log_text(SCHEDULER))
            if (r.get("dag_id"), r.get("run_id"), r.get("task_id")) == (DAG_ID, run_id, TASK_ID)
        ],
        timeout=30,
        what="the scheduler's failure line",
    )
    assert (line["failure_cause"], line["retry"]) == ("unknown", "failed"), line
    assert line["failure_reason"].startswith("Heartbeat timeout"), line
    print(f"ended {tries[0]['end_date'].timestamp() - killed_at:.1f}s after the kill")
