"""
Real scheduler code in child processes, for the AIP-122 atomicity and HA tests.

Each function here is the target of a ``multiprocessing`` *spawn* child: a fresh interpreter that
imports Airflow with the test database from the environment (set by ``conftest.py``), builds a
real ``SchedulerJobRunner`` with a real ``Job`` row and a small real executor, and runs the
scheduler's own code for one failure path. Only the fault the test needs is injected (a callback
sink or a flush that raises, a barrier, a ``SIGKILL``); nothing of the decision is replaced.
"""

from __future__ import annotations

import os
import signal
from typing import Any


def _executor(*, adopt_all: bool = False, sink: Any = None):
    from airflow.callbacks.database_callback_sink import DatabaseCallbackSink
    from airflow.executors.base_executor import BaseExecutor

    class HarnessExecutor(BaseExecutor):
        """Runs nothing; the test decides which events it reports."""

        def _process_workloads(self, workloads) -> None:  # pragma: no cover - never queued
            pass

        def sync(self) -> None:
            pass

        def revoke_task(self, *, ti) -> None:
            self.running.discard(ti.key)

        def try_adopt_task_instances(self, tis):
            return [] if adopt_all else list(tis)

        def end(self) -> None:
            pass

        def terminate(self) -> None:
            pass

    executor = HarnessExecutor()
    executor.callback_sink = sink if sink is not None else DatabaseCallbackSink()
    return executor


def _runner(job_id: int, executor):
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.utils.session import create_session

    with create_session() as session:
        job = session.get(Job, job_id)
        session.expunge(job)
    return SchedulerJobRunner(job=job, executors=[executor])


def _ti_key(ti_id: str, executor):
    """The executor's key of the task instance, which ``executor`` now runs (as if it had queued it)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from lines import DEFAULT_LINE, LINE

    with create_session() as session:
        ti = session.get(TaskInstance, ti_id)
        if LINE != DEFAULT_LINE:
            # 3.4's executors match an event only to a try they queued or adopted: queueing (or
            # adopting) registers the try's identity, and an event for an unregistered key is dropped.
            executor._register_task(ti)
            return executor.get_task_key(ti)
        return ti.key


def _snapshot(ti_id_or_run: tuple[str, str]) -> dict[str, Any]:
    """The task instance (found by run_id and task_id, its id changes per try) and its past tries."""
    from sqlalchemy import func, select, text

    from airflow.models.db_callback_request import DbCallbackRequest
    from airflow.models.log import Log
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from lines import PAST_TRIES

    run_id, task_id = ti_id_or_run
    with create_session() as session:
        # 3.4's ORM hook restricts this select to the live row (working_set IS TRUE).
        ti = session.scalar(select(TI).where(TI.run_id == run_id, TI.task_id == task_id))
        history = session.scalar(
            text(f"SELECT count(*) FROM {PAST_TRIES} WHERE run_id = :r AND task_id = :t"),
            {"r": run_id, "t": task_id},
        )
        callbacks = session.scalar(select(func.count()).select_from(DbCallbackRequest))
        # Every recorded outcome writes one audit Log row named after it (handle_failure, the route).
        outcomes = dict(
            session.execute(
                select(Log.event, func.count())
                .where(
                    Log.run_id == run_id,
                    Log.task_id == task_id,
                    Log.event.in_(("failed", "up_for_retry")),
                )
                .group_by(Log.event)
            ).all()
        )
        return {
            "state": ti.state,
            "try_number": ti.try_number,
            "max_tries": ti.max_tries,
            "infra_retry_count": ti.infra_retry_count,
            "history": history,
            "callbacks": callbacks,
            "retry_reason": ti.retry_reason,
            "outcomes": outcomes,
        }


def _count_decisions(result: dict[str, Any]) -> None:
    """Count the infrastructure-retry decisions this process logs (granted / denied)."""
    import logging

    result.setdefault("granted", 0)
    result.setdefault("denied", 0)

    class _Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if "infra_retry=granted" in msg and msg.startswith("Infrastructure retry decision"):
                result["granted"] += 1
            elif "infra_retry=denied" in msg and msg.startswith("Infrastructure retry decision"):
                result["denied"] += 1

    logger = logging.getLogger("airflow.models.taskinstance_infra_retry")
    logger.addHandler(_Count())
    logger.setLevel(logging.INFO)


def _count_recordings(result: dict[str, Any]) -> None:
    """Count the failures this scheduler recorded, and those it found already decided elsewhere."""
    from airflow.jobs import failure_reporting

    result.setdefault("recorded", 0)
    result.setdefault("not_recorded", 0)
    result.setdefault("record_errors", [])
    real_record = failure_reporting.record_scheduler_failure

    def counting_record(*args, **kwargs):
        try:
            recorded = real_record(*args, **kwargs)
        except Exception as e:
            # fail_stuck_in_queued() logs it and marks the try failed: the test must still see it.
            result["record_errors"].append(repr(e))
            raise
        result["recorded" if recorded else "not_recorded"] += 1
        return recorded

    # fail_stuck_in_queued() finds it in its module's globals.
    failure_reporting.record_scheduler_failure = counting_record  # type: ignore[assignment]


def executor_event_with_injected_fault(
    job_id: int, ti_id: str, run_id: str, task_id: str, fault: str, out: Any
) -> None:
    """
    Two scheduler loops consume one ``infra`` executor event; the first one fails before its commit.

    ``fault`` is ``sink`` (the database callback sink raises while writing the retry callback),
    ``flush`` (the flush of the failed try's state change raises) or ``none`` (no fault: the first
    loop records the failure, the second finds nothing left to do). Between the loops, and after the
    second, the task instance is read back from a fresh session and put on ``out``.
    """
    import airflow  # noqa: F401 - configure Airflow from the environment
    from airflow.callbacks.database_callback_sink import DatabaseCallbackSink
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    faults = {"left": 1}

    class FailingOnceSink(DatabaseCallbackSink):
        def send(self, callback, *, session=None):
            if fault == "sink" and faults["left"]:
                faults["left"] -= 1
                raise RuntimeError("injected: callback sink failed before the commit")
            if session is None:  # the sink's own transaction (a caller that passes no session)
                return super().send(callback)
            return super().send(callback, session=session)

    if fault == "flush":
        real_save = TaskInstance.save_to_db

        def failing_save(ti, *, session):
            if faults["left"]:
                faults["left"] -= 1
                session.flush()
                raise RuntimeError("injected: the failure's flush failed before the commit")
            return real_save(ti, session=session)

        TaskInstance.save_to_db = staticmethod(failing_save)  # type: ignore[method-assign]

    result: dict[str, Any] = {}
    _count_decisions(result)
    executor = _executor(sink=FailingOnceSink())
    runner = _runner(job_id, executor)
    key = _ti_key(ti_id, executor)
    executor.fail(key, "worker lost", failure_cause="infra", failure_reason="worker lost (test)")
    loops = []
    for _ in range(2):
        # What each scheduler loop does with the executor's events (_run_scheduler_loop).
        error = None
        try:
            with create_session() as session:
                runner._process_executor_events(executor=executor, session=session)
        except Exception as e:  # a scheduler loop that raises ends the scheduler; reported to the test
            error = repr(e)
        loops.append({**_snapshot((run_id, task_id)), "buffered": len(executor.event_buffer), "error": error})
    out.put({"loops": loops, "granted": result["granted"], "denied": result["denied"]})


def stuck_in_queued_racer(
    job_id: int,
    dead_job_id: int | None,
    read: Any,
    go: Any,
    kill_after_claim: bool,
    out: Any,
    claimed: Any = None,
    wait_for_claim: Any = None,
    start_after: Any = None,
) -> None:
    """
    One scheduler deciding a task instance stuck in queued (``infra``), in the HA race.

    The process reads the stuck task instances with the scheduler's own query, sets the ``read``
    event and waits for the ``go`` event, which the test sets once both racers have read the task
    instance: neither decides before both have read it. With
    ``dead_job_id`` the process first adopts that (dead) scheduler's task instances, as a
    replacement scheduler does. With ``kill_after_claim`` it sets ``claimed`` and SIGKILLs itself right
    after its claim succeeded, before its transaction commits; a racer given ``wait_for_claim``
    decides only once that event is set, so that the other one claims first, whatever the load.
    A racer given ``start_after`` starts its scheduler work (adoption included) only once that event
    is set, so that it can be started, and import Airflow, while the other one reads.
    """
    import airflow  # noqa: F401 - configure Airflow from the environment
    from airflow.jobs import failure_reporting

    result: dict[str, Any] = {"pid": os.getpid()}
    _count_decisions(result)
    _count_recordings(result)
    executor = _executor(adopt_all=True)
    runner = _runner(job_id, executor)
    if start_after is not None and not start_after.wait(timeout=180):
        raise RuntimeError("the other racer never read the task instance")
    if dead_job_id is not None:
        runner.adopt_or_reset_orphaned_tasks()

    real_read = runner._get_tis_stuck_in_queued

    def read_then_wait(session):
        tis = list(real_read(session))
        result["read"] = len(tis)
        result["read_states"] = [str(ti.state) for ti in tis]
        read.set()
        if not go.wait(timeout=60):
            raise RuntimeError("the other racer never read the task instance")
        if wait_for_claim is not None and not wait_for_claim.wait(timeout=120):
            raise RuntimeError("the other racer never claimed the decision")
        return tis

    runner._get_tis_stuck_in_queued = read_then_wait  # type: ignore[method-assign]

    if kill_after_claim:
        real_claim = failure_reporting.claim_retry_decision

        def claim_then_die(ti, decision, *, session):
            got = real_claim(ti, decision, session=session)
            if got is not None:
                if claimed is not None:
                    claimed.set()
                os.kill(os.getpid(), signal.SIGKILL)
            return got

        failure_reporting.claim_retry_decision = claim_then_die  # type: ignore[assignment]

    try:
        runner._handle_tasks_stuck_in_queued()
    except Exception as e:  # reported to the test, which fails on it
        result["error"] = repr(e)
    out.put(result)


def route_racer(ti_id: str, body: dict[str, Any], start: Any, read: Any, go: Any, out: Any) -> None:
    """
    The Execution API route receiving a worker's terminal state for a try, in the decision race.

    The real ``PATCH /execution/task-instances/{id}/state`` runs in this process
    (``InProcessExecutionAPI``, the app the API server mounts) on the test database; the request is
    sent once ``start`` is set. Once the route has read the task instance (under its row lock) and is
    about to take its retry decision, it sets ``read`` (recording the state it read) and waits for
    ``go``. Nothing of the route is replaced: the wait wraps its call of ``decide_retry``.
    """
    import importlib

    import airflow  # noqa: F401 - configure Airflow from the environment
    from airflow.api_fastapi.execution_api.app import InProcessExecutionAPI
    from airflow.api_fastapi.execution_api.routes import task_instances as routes

    result: dict[str, Any] = {"pid": os.getpid()}
    real_decide = routes.decide_retry

    def read_then_wait(ti, **kwargs):
        result["read_state"] = str(ti.state)
        result["read_try_number"] = ti.try_number
        read.set()
        if not go.wait(timeout=60):
            raise RuntimeError("the scheduler never read the task instance")
        return real_decide(ti, **kwargs)

    routes.decide_retry = read_then_wait  # type: ignore[assignment]

    transport = InProcessExecutionAPI().transport
    # The HTTP library of the in-process transport (httpx on 3.3, httpx2 on 3.4).
    httpx = importlib.import_module(type(transport).__module__.partition(".")[0])
    client = httpx.Client(transport=transport, base_url="http://in-process.invalid./")
    try:
        if not start.wait(timeout=180):
            raise RuntimeError("the test never let the worker report")
        resp = client.patch(
            f"task-instances/{ti_id}/state", json=body, headers={"Airflow-API-Version": "2026-11-30"}
        )
        result["status"] = resp.status_code
        result["body"] = resp.text[:2000]
    except Exception as e:  # reported to the test, which fails on it
        result["error"] = repr(e)
    if "read_state" not in result:
        read.set()  # never reached its decision: do not keep the test waiting for it
    out.put(result)


def executor_events_for_metrics(job_id: int, ti_ids: list[str], out: Any) -> None:
    """One scheduler loop consumes an ``infra`` executor event for each of ``ti_ids``."""
    import airflow  # noqa: F401 - configure Airflow (and its [metrics]) from the environment
    from airflow.utils.session import create_session

    executor = _executor()  # BaseExecutor.__init__ initialises the metrics backend, as in a scheduler
    runner = _runner(job_id, executor)
    for ti_id in ti_ids:
        key = _ti_key(ti_id, executor)
        executor.fail(key, "worker lost", failure_cause="infra", failure_reason="lost (test)")
    with create_session() as session:
        runner._process_executor_events(executor=executor, session=session)
    out.put(len(executor.event_buffer))
