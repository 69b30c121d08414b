"""
AIP-122 grants are atomic: the decision is pure, and its claim commits with the failure it decides.

* ``test_decide_retry_is_pure``: deciding writes, logs and counts nothing and leaves the task
  instance unchanged.
* ``test_a_fault_before_the_commit_spends_nothing``: a real scheduler loop, in its own process,
  consumes an ``infra`` executor event while its callback sink (or its flush) raises before the
  commit. Nothing is spent (``infra_retry_count``, ``max_tries`` and the state unchanged, no past
  try) and the event is handed back: the next loop records the failure once, with one grant.
* ``test_a_rule_decides_a_state_mismatch_through_the_scheduler``: the same real scheduler loop
  consumes an ``infra`` executor event of a try the database still holds queued or running (the
  state-mismatch path, issue 36); the task's ``RetryRule(cause="infra", action=FAIL)`` fails it, and
  the infrastructure retry it would have been granted is denied (``retry_rule``).
* ``test_two_schedulers_race_to_decide_one_failure``: two scheduler processes decide the *same*
  stuck-in-queued failure. Scheduler A reads its stuck task instances; its job is then found dead
  and scheduler B adopts them (real ``adopt_or_reset_orphaned_tasks``) and reads them too; only
  then do both go on to decide. Every round must end with exactly one grant, one past try and
  one decision line, including the rounds in which A SIGKILLs itself right after its claim.
* ``test_two_schedulers_race_to_decide_one_rule_failure``: the same race on a failure that no grant
  decides (issue 36 §4): the task's ``RetryRule(cause="infra", action=FAIL)`` fails it, so only the
  claim under the try's row lock keeps the second scheduler from recording it again.
* ``test_the_route_and_a_scheduler_race_to_decide_one_failure``: a scheduler has read a try stuck in
  queued; the worker then starts it and reports that its task process died, through the real
  Execution API route (its rule retries it). Both have read the try before either decides; the
  route's outcome is recorded, and the scheduler's (the rule's ``fail``) must not replace it.

Rounds: ``$AIP122_RACE_ROUNDS`` (the grant race), ``$AIP122_RULE_RACE_ROUNDS`` (the other two).
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


# A failure no grant decides (issue 36 §4): the task's RetryRule fails the ``infra`` failure of a
# task with retries left, so no conditional UPDATE of the infra-retry counter claims it; only the
# claim under the try's row lock keeps a second decider from recording it again.
RULE_TASK = "rule_fail"
RULE_FAIL_REASON = "rules[0] (cause=infra) -> fail"
RULE_RETRY_REASON = "rules[1] (cause=unknown) -> retry"


def _rule_race_round() -> tuple[dict, list[dict], list[int | None]]:
    with _session() as session:
        dead_job = _job(session, heartbeat_age=timedelta(hours=1))
        live_job = _job(session)
        _, run_id = _new_try(session, RULE_TASK, state="queued", job_id=dead_job)

    out = SPAWN.Queue()
    a_read, b_read, go = SPAWN.Event(), SPAWN.Event(), SPAWN.Event()
    a = SPAWN.Process(
        target=scheduler_harness.stuck_in_queued_racer, args=(dead_job, None, a_read, go, False, out)
    )
    # B adopts A's task instances only after A has read them (it starts, and imports, meanwhile).
    b = SPAWN.Process(
        target=scheduler_harness.stuck_in_queued_racer,
        args=(live_job, dead_job, b_read, go, False, out, None, None, a_read),
    )
    a.start()
    b.start()
    try:
        assert a_read.wait(timeout=180), "scheduler A never read its stuck task instances"
        assert b_read.wait(timeout=180), "scheduler B never read the adopted task instances"
        go.set()
        results = [out.get(timeout=180) for _ in range(2)]
    finally:
        for p in (a, b):
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return _state(run_id, RULE_TASK), results, [a.exitcode, b.exitcode]


@pytest.mark.e2e
def test_two_schedulers_race_to_decide_one_rule_failure(child_env):
    """Two schedulers decide one stuck-in-queued failure that a retry rule fails: one records it."""
    rounds = int(os.environ.get("AIP122_RULE_RACE_ROUNDS", "3"))
    for i in range(rounds):
        state, results, exitcodes = _rule_race_round()
        where = f"round {i}: {state}, {results}, exit codes {exitcodes}"
        assert exitcodes == [0, 0], where
        # Both read the try undecided before either decided it.
        assert [r.get("read_states") for r in results] == [["queued"], ["queued"]], where
        assert [r.get("error") for r in results] == [None, None], where
        assert [r["record_errors"] for r in results] == [[], []], where
        # The rule decided, once: one outcome recorded, by exactly one of the two schedulers; the
        # other found the try already decided and recorded nothing.
        assert (state["state"], state["try_number"], state["retry_reason"]) == (
            "failed",
            1,
            RULE_FAIL_REASON,
        ), where
        assert state["outcomes"] == {"failed": 1}, where
        assert sorted((r["recorded"], r["not_recorded"]) for r in results) == [(0, 1), (1, 0)], where
        # The failed try is not archived as a past try (a retry would have archived it once).
        assert state["history"] == 0, where
        assert (state["max_tries"], state["infra_retry_count"]) == (2, 0), where


@pytest.mark.e2e
@pytest.mark.parametrize("db_state", ["queued", "running"])
def test_a_rule_decides_a_state_mismatch_through_the_scheduler(child_env, db_state):
    """
    The executor reports an ``infra`` failure of a try the database still holds queued or running.

    That is the scheduler's state-mismatch path (``_process_executor_events``), here in a real
    scheduler: rule 0 of the task (``cause="infra"``, ``FAIL``) decides it. The try fails at once
    with the rule as its reason, although an infrastructure retry (cap 3) and 2 retries are left;
    without the rule the scheduler would grant the infrastructure retry.
    """
    with _session() as session:
        job_id = _job(session)
        ti_id, run_id = _new_try(session, RULE_TASK, state=db_state, job_id=job_id)

    out = SPAWN.Queue()
    proc = SPAWN.Process(
        target=scheduler_harness.executor_event_with_injected_fault,
        args=(job_id, ti_id, run_id, RULE_TASK, "none", out),
    )
    proc.start()
    try:
        got = out.get(timeout=180)
    finally:
        proc.join(timeout=60)
    assert proc.exitcode == 0

    first, second = got["loops"]
    assert (first["error"], second["error"]) == (None, None), got
    assert (first["state"], first["try_number"], first["retry_reason"]) == ("failed", 1, RULE_FAIL_REASON), (
        got
    )
    # No budget spent, no past try archived, one outcome recorded (the second loop had nothing left).
    assert (first["max_tries"], first["infra_retry_count"], first["history"]) == (2, 0, 0), got
    assert first["outcomes"] == second["outcomes"] == {"failed": 1}, got
    assert (first["buffered"], second["buffered"]) == (0, 0), got
    # The infrastructure retry it would have been granted is denied (reason retry_rule), once.
    assert (got["granted"], got["denied"]) == (0, 1), got


def _route_race_round() -> tuple[dict, dict, dict, list[int | None]]:
    from sqlalchemy import select

    from airflow._shared.timezones import timezone
    from airflow.models.taskinstance import TaskInstance as TI

    with _session() as session:
        job_id = _job(session)
        ti_id, run_id = _new_try(session, RULE_TASK, state="queued", job_id=job_id)

    out_s, out_r = SPAWN.Queue(), SPAWN.Queue()
    s_read, r_start, r_read, go = SPAWN.Event(), SPAWN.Event(), SPAWN.Event(), SPAWN.Event()
    scheduler = SPAWN.Process(
        target=scheduler_harness.stuck_in_queued_racer, args=(job_id, None, s_read, go, False, out_s)
    )
    # The worker's supervisor reports a task process that died: the route applies the task's rules.
    body = {
        "state": "up_for_retry",
        "end_date": timezone.utcnow().isoformat(),
        "failure_cause": "unknown",
        "failure_reason": "Task process was killed by SIGKILL (9) before it reported a state.",
        "task_process_died": True,
    }
    route = SPAWN.Process(
        target=scheduler_harness.route_racer, args=(ti_id, body, r_start, r_read, go, out_r)
    )
    scheduler.start()
    route.start()  # it sends its request only once told to (r_start)
    try:
        # The scheduler reads the try stuck in queued ...
        assert s_read.wait(timeout=180), "the scheduler never read its stuck task instances"
        # ... the worker then starts it after all (the Execution API's /run) ...
        with _session() as session:
            ti = session.scalar(select(TI).where(TI.id == ti_id))
            ti.state = "running"
            ti.last_heartbeat_at = timezone.utcnow()
        # ... and reports that its task process died; the route reads the running try, then both go.
        r_start.set()
        assert r_read.wait(timeout=180), "the route never read the task instance"
        go.set()
        s_result, r_result = out_s.get(timeout=180), out_r.get(timeout=180)
    finally:
        for p in (scheduler, route):
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return _state(run_id, RULE_TASK), s_result, r_result, [scheduler.exitcode, route.exitcode]


@pytest.mark.e2e
def test_the_route_and_a_scheduler_race_to_decide_one_failure(child_env):
    """
    A scheduler failing a try stuck in queued races the worker's report of the same try.

    The scheduler read the try as stuck in queued; the worker then started it and reports that its
    task process died. The route holds the try's row lock from its read to its commit, so it records
    its outcome (rule 1's retry); the scheduler's decision (rule 0's fail), taken on its earlier
    read, must then find the try decided and record nothing.
    """
    # The route holds the row lock from its read: every round ends the same way, two are enough.
    rounds = int(os.environ.get("AIP122_RULE_RACE_ROUNDS", "2"))
    for i in range(rounds):
        state, s_result, r_result, exitcodes = _route_race_round()
        where = f"round {i}: {state}, scheduler {s_result}, route {r_result}, exit codes {exitcodes}"
        assert exitcodes == [0, 0], where
        # Both read the try before either decided: the scheduler stuck in queued, the route running.
        assert s_result.get("read_states") == ["queued"], where
        assert (r_result.get("read_state"), r_result.get("read_try_number")) == ("running", 1), where
        assert [s_result.get("error"), r_result.get("error")] == [None, None], where
        assert s_result["record_errors"] == [], where
        # One outcome: the route's (204) ...
        assert r_result["status"] == 204, where
        assert (state["state"], state["try_number"], state["retry_reason"]) == (
            "up_for_retry",
            PENDING_TRY,
            RULE_RETRY_REASON,
        ), where
        assert state["outcomes"] == {"up_for_retry": 1}, where
        assert state["history"] == 1, where
        # ... and the scheduler found the try decided elsewhere and recorded nothing.
        assert (s_result["recorded"], s_result["not_recorded"]) == (0, 1), where
