"""
AIP-122 grants are atomic: the decision is pure, and its claim commits with the failure it decides.

* ``test_decide_retry_is_pure``: deciding writes, logs and counts nothing and leaves the task
  instance unchanged.
* ``test_a_fault_before_the_commit_spends_nothing``: a real scheduler loop, in its own process,
  consumes an ``infra`` executor event while its callback sink (or its flush) raises before the
  commit. Nothing is spent (``infra_retry_count``, ``max_tries`` and the state unchanged, no past
  try) and the event is handed back: the next loop records the failure once, with one grant.
* ``test_two_schedulers_race_to_decide_one_failure``: two scheduler processes decide the *same*
  stuck-in-queued failure. Scheduler A reads its stuck task instances; its job is then found dead
  and scheduler B adopts them (real ``adopt_or_reset_orphaned_tasks``) and reads them too; only
  then do both go on to decide. Every round must end with exactly one grant, one past try and
  one decision line, including the rounds in which A SIGKILLs itself right after its claim.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from datetime import timedelta

import pytest

# Import (and so configure) Airflow before any fixture touches logging; conftest set its environment.
import airflow  # noqa: F401

import _db
import scheduler_harness
from _tries import pending_try

pytestmark = [pytest.mark.usefixtures("db_env"), pytest.mark.postgres]

DAG_ID = _db.DAG_ID
SPAWN = multiprocessing.get_context("spawn")
PENDING_TRY = pending_try(1)  # the live row's try_number once try 1 was granted a retry


@pytest.fixture
def child_env(monkeypatch):
    """Configuration the scheduler children read (the spawn children inherit the environment)."""
    monkeypatch.setenv("AIRFLOW__CORE__MAX_INFRA_RETRIES", "3")
    monkeypatch.setenv("AIRFLOW__CORE__INFRA_RETRY_DELAY", "1")
    monkeypatch.setenv("AIRFLOW__SCHEDULER__NUM_STUCK_IN_QUEUED_RETRIES", "0")
    monkeypatch.setenv("AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT", "1")
    monkeypatch.setenv("AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD", "30")


_session = _db.session


def _job(session, *, heartbeat_age: timedelta = timedelta(0)) -> int:
    from airflow._shared.timezones import timezone
    from airflow.jobs.job import Job, JobState

    job = Job(job_type="SchedulerJob")
    job.state = JobState.RUNNING
    job.latest_heartbeat = timezone.utcnow() - heartbeat_age
    session.add(job)
    session.commit()
    return job.id


def _new_try(session, task_id: str, *, state: str, job_id: int) -> tuple[str, str]:
    """A run of the Dag with ``task_id`` in try 1, ``state``, queued by ``job_id`` long ago."""
    from sqlalchemy import select

    from airflow._shared.timezones import timezone
    from airflow.models.taskinstance import TaskInstance as TI

    run_id = _db.new_run(session, "aip122_atomic")
    now = timezone.utcnow()
    ti = session.scalar(select(TI).where(TI.run_id == run_id, TI.task_id == task_id))
    ti.try_number = 1
    ti.state = state
    ti.queued_by_job_id = job_id
    ti.queued_dttm = now - timedelta(hours=1)
    ti.start_date = now
    ti.last_heartbeat_at = now
    session.commit()
    return ti.id, run_id


def _state(run_id: str, task_id: str) -> dict:
    return scheduler_harness._snapshot((run_id, task_id))


def _callback_rows() -> int:
    from sqlalchemy import func, select

    from airflow.models.db_callback_request import DbCallbackRequest

    with _session() as session:
        return session.scalar(select(func.count()).select_from(DbCallbackRequest))


def test_decide_retry_is_pure(monkeypatch, caplog):
    """No write, no metric, no log line; the task instance is not changed."""
    from sqlalchemy import event

    from airflow._shared.observability.metrics import stats
    from airflow.models.taskinstance_failure import decide_retry

    monkeypatch.setenv("AIRFLOW__CORE__MAX_INFRA_RETRIES", "2")
    with _session() as session:
        job_id = _job(session)
        _, run_id = _new_try(session, "r0", state="running", job_id=job_id)
        from sqlalchemy import select

        from airflow.models.taskinstance import TaskInstance as TI

        ti = session.scalar(select(TI).where(TI.run_id == run_id, TI.task_id == "r0"))
        before = {
            c: getattr(ti, c) for c in ("state", "max_tries", "infra_retry_count", "retry_delay_override")
        }

        statements: list[str] = []
        counted: list[str] = []

        def record(conn, cursor, statement, *args):
            statements.append(statement.split()[0].upper())

        monkeypatch.setattr(stats, "incr", lambda name, *a, **k: counted.append(name))
        engine = session.get_bind()
        event.listen(engine, "before_cursor_execute", record)
        try:
            with caplog.at_level(logging.DEBUG, logger="airflow.models.taskinstance_infra_retry"):
                decision = decide_retry(ti, failure_cause="infra", session=session, apply_retry_rules=True)
        finally:
            event.remove(engine, "before_cursor_execute", record)

        assert decision.retry
        assert decision.infra_retry.granted
        assert not decision.claimed
        assert (decision.infra_retry.infra_retry_count, decision.infra_retry.max_tries) == (1, 1)
        assert [s for s in statements if s not in ("SELECT", "WITH")] == []
        assert counted == []
        assert [r for r in caplog.records if r.name == "airflow.models.taskinstance_infra_retry"] == []
        assert {c: getattr(ti, c) for c in before} == before
        assert not session.dirty


@pytest.mark.parametrize("fault", ["sink", "flush"])
def test_a_fault_before_the_commit_spends_nothing(child_env, fault):
    with _session() as session:
        job_id = _job(session)
        ti_id, run_id = _new_try(session, "cb_r0", state="running", job_id=job_id)
    callbacks_before = _callback_rows()

    out = SPAWN.Queue()
    proc = SPAWN.Process(
        target=scheduler_harness.executor_event_with_injected_fault,
        args=(job_id, ti_id, run_id, "cb_r0", fault, out),
    )
    proc.start()
    try:
        got = out.get(timeout=180)
    finally:
        proc.join(timeout=60)
    assert proc.exitcode == 0

    first, second = got["loops"]
    # The scheduler loop survives the fault (an exception out of it would end the scheduler).
    assert (first["error"], second["error"]) == (None, None), got
    # The loop that failed before its commit spent nothing and recorded nothing ...
    assert (first["state"], first["try_number"], first["max_tries"], first["infra_retry_count"]) == (
        "running",
        1,
        0,
        0,
    )
    assert first["history"] == 0
    assert first["callbacks"] == callbacks_before
    # ... and handed the event back to the executor, so the next loop recorded it, once.
    assert first["buffered"] == 1
    assert (second["state"], second["try_number"], second["max_tries"], second["infra_retry_count"]) == (
        "up_for_retry",
        PENDING_TRY,
        1,
        1,
    )
    assert second["history"] == 1
    assert second["buffered"] == 0
    # The retry callback was written with the failure (one request, in the same commit).
    assert second["callbacks"] == callbacks_before + 1
    # The decision was logged (and counted) once: by the loop whose claim succeeded.
    assert (got["granted"], got["denied"]) == (1, 0)


def _race_round(kill_after_claim: bool) -> tuple[dict, list[dict], list[int | None]]:
    with _session() as session:
        # A's heartbeat is old: B's adoption finds it dead (a scheduler that stalled, then resumed).
        dead_job = _job(session, heartbeat_age=timedelta(hours=1))
        live_job = _job(session)
        _, run_id = _new_try(session, "r0", state="queued", job_id=dead_job)

    out = SPAWN.Queue()
    a_read, b_read, go, a_claimed = SPAWN.Event(), SPAWN.Event(), SPAWN.Event(), SPAWN.Event()
    a = SPAWN.Process(
        target=scheduler_harness.stuck_in_queued_racer,
        args=(dead_job, None, a_read, go, kill_after_claim, out, a_claimed),
    )
    b = SPAWN.Process(
        target=scheduler_harness.stuck_in_queued_racer,
        # In a kill round B decides only once A has claimed, so that A dies holding the claim.
        args=(live_job, dead_job, b_read, go, False, out, None, a_claimed if kill_after_claim else None),
    )
    a.start()
    try:
        assert a_read.wait(timeout=180), "scheduler A never read its stuck task instances"
        b.start()  # B adopts A's task instances only after A has read them
        assert b_read.wait(timeout=180), "scheduler B never read the adopted task instances"
        go.set()
        results = []
        for _ in range(1 if kill_after_claim else 2):
            results.append(out.get(timeout=180))
        if kill_after_claim:
            a.join(timeout=60)
            if a.exitcode == 0:  # A lost the claim: it was not killed and reports too
                results.append(out.get(timeout=60))
    finally:
        for p in (a, b):
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return _state(run_id, "r0"), results, [a.exitcode, b.exitcode]


@pytest.mark.e2e
def test_two_schedulers_race_to_decide_one_failure(child_env):
    rounds = int(os.environ.get("AIP122_RACE_ROUNDS", "6"))
    kills = 0
    for i in range(rounds):
        kill = i % 2 == 1
        state, results, exitcodes = _race_round(kill_after_claim=kill)
        where = f"round {i} (kill_after_claim={kill}): {state}, {results}, exit codes {exitcodes}"
        assert all(r.get("read") == 1 for r in results), where
        assert [r["error"] for r in results if "error" in r] == [], where
        assert (state["state"], state["try_number"], state["max_tries"], state["infra_retry_count"]) == (
            "up_for_retry",
            PENDING_TRY,
            1,
            1,
        ), where
        assert state["history"] == 1, where
        # One decision line per round, from the process whose claim committed (a killed process's
        # claim rolled back with its transaction, and it died before it could log).
        assert sum(r["granted"] for r in results) == 1, where
        assert sum(r["denied"] for r in results) == 0, where
        if kill:
            # A claimed first and was killed before its commit; B's claim then won.
            assert exitcodes == [-9, 0], where
            kills += 1
        else:
            assert exitcodes == [0, 0], where
    assert kills == rounds // 2
