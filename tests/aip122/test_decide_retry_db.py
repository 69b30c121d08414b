"""
AIP-122 retry semantics on a real PostgreSQL database with real Dag runs and TaskInstance rows.

Each test creates a fresh run of ``dags/aip122_db_dag.py`` (serialized into the database by the
``db_env`` fixture), puts a task instance into ``running`` the way the scheduler would (try_number
raised by one) and fails it through ``TaskInstance.handle_failure`` -- the path every scheduler
failure (executor event, state mismatch, heartbeat timeout, stuck in queued) takes -- with the
cause the executor reported. Nothing is mocked; the configuration comes from environment
variables, as in a deployment.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest

# Import (and so configure) Airflow before any fixture touches logging; conftest set its environment.
import airflow  # noqa: F401
import _db
from _tries import pending_try
from lines import PAST_TRIES
from lines import DEFAULT_LINE, LINE

pytestmark = pytest.mark.usefixtures("db_env")

DAG_ID = _db.DAG_ID
INFRA = "infra"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def decision_log():
    """The lines logged by the infrastructure-retry decision (whatever Airflow's logging setup is)."""
    logger = logging.getLogger("airflow.models.taskinstance_infra_retry")
    handler = _Records()
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old_level)


@pytest.fixture
def infra_config(monkeypatch):
    """Set ``[core] max_infra_retries`` / ``infra_retry_delay`` through the environment."""

    def set_(max_infra_retries: int | None = None, delay: float | None = None) -> None:
        if max_infra_retries is None:
            monkeypatch.delenv("AIRFLOW__CORE__MAX_INFRA_RETRIES", raising=False)
        else:
            monkeypatch.setenv("AIRFLOW__CORE__MAX_INFRA_RETRIES", str(max_infra_retries))
        if delay is not None:
            monkeypatch.setenv("AIRFLOW__CORE__INFRA_RETRY_DELAY", str(delay))

    return set_


_session = _db.session
_dag = _db.dag
_new_run = _db.new_run


def _ti(session, run_id: str, task_id: str, map_index: int = -1):
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance as TI

    return session.scalar(
        select(TI).where(
            TI.dag_id == DAG_ID, TI.run_id == run_id, TI.task_id == task_id, TI.map_index == map_index
        )
    )


def _start_try(session, ti, *, attach_task: bool = True):
    """Start the next try of ``ti`` like the scheduler and the Execution API would."""
    from airflow.utils.state import TaskInstanceState

    if LINE == DEFAULT_LINE:
        ti.try_number += 1
    elif ti.try_number == 0:
        # 3.4 allocates a try number when the previous try is archived: the pending row of a retry
        # (or a clear) already carries it, and scheduling only turns 0 into 1 (DagRun.schedule_tis).
        ti.try_number = 1
    ti.state = TaskInstanceState.RUNNING
    ti.retry_delay_override = None  # ti_run clears it when a try starts
    if attach_task:
        ti.task = _dag(session).get_task(ti.task_id)
    session.commit()
    return ti


def _live(session, ti):
    """The row that now holds ``ti``'s task instance (3.4: a retry or a clear moves it to a new row)."""
    live = _ti(session, ti.run_id, ti.task_id, ti.map_index)
    session.refresh(live)  # as stored, not as the session's copy last saw it
    return live


def _fail(session, ti, cause: str | None, *, attach_task: bool = True):
    """Fail the current try of ``ti`` with ``cause``; return the task instance's live row afterwards."""
    if attach_task and getattr(ti, "task", None) is None:
        ti.task = _dag(session).get_task(ti.task_id)
    ti.handle_failure(error=f"try {ti.try_number} failed ({cause})", session=session, failure_cause=cause)
    session.commit()
    return _live(session, ti)


def _run_tries(task_id: str, causes: list[str]) -> tuple[list[str], object]:
    """Run one try per cause (stopping when the task instance fails); return the states and the TI."""
    states: list[str] = []
    with _session() as session:
        run_id = _new_run(session)
        ti = _ti(session, run_id, task_id)
        for cause in causes:
            _start_try(session, ti)
            ti = _fail(session, ti, cause)
            states.append(ti.state)
            if states[-1] == "failed":
                break
        session.refresh(ti)
        session.expunge(ti)
    return states, ti


def test_infra_failure_at_retries_0_is_retried_without_spending_retries(infra_config, decision_log):
    infra_config(max_infra_retries=1, delay=7)
    with _session() as session:
        run_id = _new_run(session)
        ti = _ti(session, run_id, "r0")
        _start_try(session, ti)
        ti = _fail(session, ti, INFRA)
        assert ti.state == "up_for_retry"
        assert (ti.try_number, ti.max_tries, ti.infra_retry_count) == (pending_try(1), 1, 1)
        assert ti.failure_cause == INFRA
        # The first infrastructure retry starts at once (retry-rules' backoff), not after the task's
        # retry_delay (300 s by default).
        assert ti.retry_delay_override == 0.0
        ti.task = _dag(session).get_task("r0")
        assert ti.next_retry_datetime() == ti.end_date + timedelta(seconds=ti.retry_delay_override)

        # The archived try keeps its cause and the count as of its own decision.
        from sqlalchemy import text

        hist = session.execute(
            text(
                f"SELECT try_number, failure_cause, infra_retry_count FROM {PAST_TRIES} "
                "WHERE run_id = :r AND task_id = 'r0' ORDER BY try_number"
            ),
            {"r": run_id},
        ).all()
        assert [tuple(h) for h in hist] == [(1, INFRA, 1)]

        # The second try fails for an application reason: retries=0 still means no retry.
        _start_try(session, ti)
        ti = _fail(session, ti, "application")
        assert ti.state == "failed"
        assert (ti.try_number, ti.max_tries, ti.infra_retry_count) == (2, 1, 1)
    assert "infra_retry=granted reason=granted" in decision_log.text


def test_default_config_fails_like_upstream(infra_config, decision_log):
    infra_config(max_infra_retries=None)
    states, ti = _run_tries("r0", [INFRA])
    assert states == ["failed"]
    assert (ti.try_number, ti.max_tries, ti.infra_retry_count) == (1, 0, 0)
    assert "infra_retry=denied reason=disabled" in decision_log.text


def test_cap_holds_under_repeated_infra_failures(infra_config):
    infra_config(max_infra_retries=3, delay=1)
    states, ti = _run_tries("r0", [INFRA] * 6)
    assert states == ["up_for_retry"] * 3 + ["failed"]
    assert (ti.try_number, ti.max_tries, ti.infra_retry_count) == (4, 3, 3)


def test_ordinary_retries_are_kept_after_infra_retries(infra_config):
    infra_config(max_infra_retries=2, delay=1)
    # retries=2: two infra retries, then the user's two ordinary retries, then failed.
    causes = [INFRA, INFRA, "application", "application", "application"]
    states, ti = _run_tries("r2", causes)
    assert states == ["up_for_retry"] * 4 + ["failed"]
    assert (ti.try_number, ti.max_tries, ti.infra_retry_count) == (5, 4, 2)


def test_infra_retry_does_not_spend_an_ordinary_retry(infra_config):
    infra_config(max_infra_retries=1, delay=1)
    # An ordinary retry first, then an infra failure, then the last ordinary retry.
    states, ti = _run_tries("r2", ["application", INFRA, "timeout", "unknown"])
    assert states == ["up_for_retry", "up_for_retry", "up_for_retry", "failed"]
    assert ti.infra_retry_count == 1


@pytest.mark.parametrize("cause", ["application", "timeout", "unknown", None])
def test_other_causes_never_get_an_infra_retry(infra_config, cause):
    infra_config(max_infra_retries=5)
    states, ti = _run_tries("r0", [cause])
    assert states == ["failed"]
    assert (ti.max_tries, ti.infra_retry_count) == (0, 0)
    # With retries left the ordinary budget is spent, exactly as upstream.
    states, ti = _run_tries("r2", [cause])
    assert states == ["up_for_retry"]
    assert (ti.max_tries, ti.infra_retry_count) == (2, 0)


def test_task_max_infra_retries_0_beats_the_config(infra_config, decision_log):
    infra_config(max_infra_retries=5)
    states, ti = _run_tries("opt_out", [INFRA])
    assert states == ["failed"]
    assert ti.infra_retry_count == 0
    assert "infra_retry=denied reason=task_opt_out" in decision_log.text


def test_task_max_infra_retries_opts_in_when_the_config_is_off(infra_config):
    infra_config(max_infra_retries=None, delay=1)
    states, ti = _run_tries("opt_in_2", [INFRA] * 4)
    assert states == ["up_for_retry", "up_for_retry", "failed"]
    assert ti.infra_retry_count == 2


def test_a_task_run_as_another_user_gets_no_infra_retry(infra_config, decision_log):
    """sudo clears the parent-death signal: the lost try may still run, so no fast retry beside it."""
    infra_config(max_infra_retries=5)
    states, ti = _run_tries("impersonated", [INFRA])
    assert states == ["failed"]
    assert (ti.infra_retry_count, ti.failure_cause) == (0, "infra")
    assert "infra_retry=denied reason=impersonated" in decision_log.text


def test_only_unexpected_denials_are_warnings(infra_config):
    """With the feature off, every infra failure is denied ``disabled``: that is not worth a warning."""
    logger = logging.getLogger("airflow.models.taskinstance_infra_retry")
    warnings = _Records()
    warnings.setLevel(logging.WARNING)
    logger.addHandler(warnings)
    try:
        infra_config(max_infra_retries=None)
        assert _run_tries("r0", [INFRA])[0] == ["failed"]
        assert warnings.lines == []
        infra_config(max_infra_retries=5)
        assert _run_tries("impersonated", [INFRA])[0] == ["failed"]
        assert ["reason=impersonated" in line for line in warnings.lines] == [True]
    finally:
        logger.removeHandler(warnings)


def test_default_impersonation_denies_infra_retries_too(infra_config, monkeypatch, decision_log):
    infra_config(max_infra_retries=5)
    monkeypatch.setenv("AIRFLOW__CORE__DEFAULT_IMPERSONATION", "nobody")
    states, ti = _run_tries("r0", [INFRA])
    assert states == ["failed"]
    assert ti.infra_retry_count == 0
    assert "infra_retry=denied reason=impersonated" in decision_log.text


def test_task_loaded_from_the_serialized_dag_when_not_attached(infra_config):
    """The worker-reported path has no task attached; the per-task setting must still apply."""
    from airflow.models.taskinstance_failure import claim_retry_decision, decide_retry

    infra_config(max_infra_retries=5)
    with _session() as session:
        run_id = _new_run(session)
        ti = _ti(session, run_id, "opt_out")
        _start_try(session, ti, attach_task=False)
        ti = _ti(session, run_id, "opt_out")  # fresh object, no task
        decision = decide_retry(ti, failure_cause=INFRA, retry_eligible=False, session=session, apply_retry_rules=True)
        assert decision.retry is False
        assert decision.infra_retry.reason.value == "task_opt_out"

        ti = _ti(session, run_id, "r0")
        _start_try(session, ti, attach_task=False)
        ti = _ti(session, run_id, "r0")
        decision = decide_retry(ti, failure_cause=INFRA, retry_eligible=False, session=session, apply_retry_rules=True)
        assert decision.retry is True
        assert decision.infra_retry.granted
        # The decision is pure: only the claim, in the transaction recording the failure, spends it.
        assert claim_retry_decision(ti, decision, session=session) is not None
        session.commit()
        session.refresh(ti)
        assert (ti.infra_retry_count, ti.max_tries) == (1, 1)


def test_mapped_task_instances_have_their_own_counters(infra_config):
    infra_config(max_infra_retries=None, delay=1)
    with _session() as session:
        run_id = _new_run(session)
        from sqlalchemy import select

        from airflow.models.dagrun import DagRun

        dr = session.scalar(select(DagRun).where(DagRun.dag_id == DAG_ID, DagRun.run_id == run_id))
        dr.dag = _dag(session)
        dr.task_instance_scheduling_decisions(session=session)  # expands the mapped task
        session.commit()
        ti0, ti1 = _ti(session, run_id, "mapped", 0), _ti(session, run_id, "mapped", 1)
        assert ti0 is not None
        assert ti1 is not None
        _start_try(session, ti0)
        ti0 = _fail(session, ti0, INFRA)
        assert ti0.state == "up_for_retry"  # partial(max_infra_retries=1)
        _start_try(session, ti0)
        ti0 = _fail(session, ti0, INFRA)
        assert ti0.state == "failed"
        _start_try(session, ti1)
        ti1 = _fail(session, ti1, INFRA)
        assert ti1.state == "up_for_retry"
        session.refresh(ti0)
        session.refresh(ti1)
        assert (ti0.infra_retry_count, ti1.infra_retry_count) == (1, 1)


def test_clear_resets_the_counter(infra_config):
    from airflow.models.taskinstance import clear_task_instances

    infra_config(max_infra_retries=1, delay=1)
    with _session() as session:
        run_id = _new_run(session)
        ti = _ti(session, run_id, "r0")
        _start_try(session, ti)
        ti = _fail(session, ti, INFRA)
        assert ti.state == "up_for_retry"
        _start_try(session, ti)
        ti = _fail(session, ti, INFRA)
        assert ti.state == "failed"  # cap reached
        assert ti.infra_retry_count == 1
        failed_try = ti.try_number

        clear_task_instances([ti], session)
        session.commit()
        ti = _live(session, ti)
        assert ti.state is None
        assert ti.infra_retry_count == 0
        # retries=0: the clear's own budget (tries so far + retries), as upstream. 3.4 archives the
        # cleared try and allocates the next try number on the cleared row; 3.3 reuses the row.
        assert ti.try_number == pending_try(failed_try)
        assert ti.max_tries == failed_try + 0

        # After the clear the task instance has its allowance again.
        _start_try(session, ti)
        ti = _fail(session, ti, INFRA)
        assert ti.state == "up_for_retry"
        assert ti.infra_retry_count == 1


def test_a_stale_failure_is_not_granted(infra_config, decision_log):
    """A failure decided after the try already ended (a late event) is denied, not counted."""
    from airflow.models.taskinstance_failure import decide_retry
    from airflow.utils.state import TaskInstanceState

    infra_config(max_infra_retries=3)
    with _session() as session:
        run_id = _new_run(session)
        ti = _ti(session, run_id, "r0")
        _start_try(session, ti)
        ti.state = TaskInstanceState.SUCCESS
        session.commit()
        decision = decide_retry(ti, failure_cause=INFRA, apply_retry_rules=True)
        assert not decision.retry
        assert decision.infra_retry.reason.value == "stale"
        session.commit()
        session.refresh(ti)
        assert (ti.infra_retry_count, ti.max_tries) == (0, 0)


@pytest.mark.postgres
def test_concurrent_deciders_grant_a_failure_once(infra_config):
    """
    HA: two schedulers (two sessions, two threads) decide the same infra failure at the same time.

    Both read the task instance while it is running with infra_retry_count=0 and both decide to
    grant; exactly one claim reaches the database, the other sees the row changed under it.
    """
    from airflow.models.taskinstance_failure import claim_retry_decision, decide_retry

    infra_config(max_infra_retries=5)
    rounds = 8
    for _ in range(rounds):
        with _session() as session:
            run_id = _new_run(session)
            ti = _ti(session, run_id, "r0")
            _start_try(session, ti)
            ti_id = ti.id

        both_loaded = threading.Barrier(2)
        results: list[bool] = []
        errors: list[BaseException] = []

        def decider():
            try:
                from sqlalchemy import select

                from airflow.models.taskinstance import TaskInstance as TI

                with _session() as s:
                    ti_ = s.scalar(select(TI).where(TI.id == ti_id))
                    ti_.task = _dag(s).get_task("r0")
                    both_loaded.wait(timeout=30)
                    decision = decide_retry(ti_, failure_cause=INFRA, apply_retry_rules=True)
                    assert decision.infra_retry.granted
                    results.append(claim_retry_decision(ti_, decision, session=s) is not None)
                    # create_session commits on exit: the winner releases its row lock here.
            except BaseException as e:  # pragma: no cover - surfaced below
                errors.append(e)

        threads = [threading.Thread(target=decider) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        assert sorted(results) == [False, True]
        with _session() as session:
            ti = _ti(session, run_id, "r0")
            assert (ti.infra_retry_count, ti.max_tries) == (1, 1)


def test_grants_survive_the_callback_sink_closing_the_scheduler_session(infra_config):
    """
    Regression: the scheduler decides, then sends the retry callback, then records the failure.

    The database callback sink commits and closes the scheduler's scoped session, detaching the
    task instances of the batch still being processed. Every grant in the batch must still be
    claimed once and saved (max_tries, infra_retry_count, delay), like process_executor_events does.
    """
    from sqlalchemy import inspect, select
    from sqlalchemy.orm import joinedload

    from airflow import settings
    from airflow.callbacks.callback_requests import DagCallbackRequest
    from airflow.callbacks.database_callback_sink import DatabaseCallbackSink
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.models.taskinstance_failure import decide_retry
    from airflow.utils.sqlalchemy import with_row_locks

    infra_config(max_infra_retries=3, delay=2)
    task_ids = ["r0", "r2", "opt_in_2"]
    with _session() as session:
        run_id = _new_run(session)
        for task_id in task_ids:
            _start_try(session, _ti(session, run_id, task_id), attach_task=False)

    sink = DatabaseCallbackSink()
    detached = []
    session = settings.Session()
    try:
        dag = _dag(session)
        query = (
            select(TI).where(TI.run_id == run_id, TI.task_id.in_(task_ids)).options(joinedload(TI.dag_run))
        )
        for ti in session.scalars(with_row_locks(query, of=TI, session=session, skip_locked=True)):
            ti.task = dag.get_task(ti.task_id)
            decision = decide_retry(ti, failure_cause=INFRA, apply_retry_rules=True)
            assert decision.infra_retry.granted
            # The real sink, called as the scheduler calls it (no session: its own, the scoped one).
            sink.send(
                DagCallbackRequest(
                    filepath="aip122_db_dag.py",
                    bundle_name="dags-folder",
                    bundle_version=None,
                    dag_id=DAG_ID,
                    run_id=run_id,
                    msg=f"retry callback of {ti.task_id}",
                )
            )
            detached.append(inspect(ti).detached)
            ti.handle_failure(error="lost", session=session, failure_cause=INFRA, retry_decision=decision)
    finally:
        settings.Session.remove()

    # The sink did close the scheduler's session under the batch: the case this test is about.
    assert detached == [True] * len(task_ids)
    with _session() as session:
        got = {t: _ti(session, run_id, t) for t in task_ids}
        assert {t: (ti.state, ti.max_tries, ti.infra_retry_count) for t, ti in got.items()} == {
            "r0": ("up_for_retry", 1, 1),
            "r2": ("up_for_retry", 3, 1),
            "opt_in_2": ("up_for_retry", 1, 1),
        }
        assert all(ti.retry_delay_override == 0.0 for ti in got.values())  # first retries: at once


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        # Trust boundary (issue 9, part 2): a worker-reported infra is recorded as unknown and never
        # granted; only executor-side or scheduler-side evidence earns an infra retry.
        ("infra", ("failed", 0, 0, None, "unknown")),
        ("application", ("failed", 0, 0, None, "application")),
    ],
)
def test_worker_reported_failure_through_the_execution_api(infra_config, cause, expected):
    """The Execution API's ti_update_state route takes the same decision (real route, real DB)."""
    import importlib

    from airflow._shared.timezones import timezone
    from airflow.api_fastapi.execution_api.app import InProcessExecutionAPI

    infra_config(max_infra_retries=1, delay=3)
    with _session() as session:
        run_id = _new_run(session)
        ti = _ti(session, run_id, "r0")
        _start_try(session, ti, attach_task=False)
        ti_id = ti.id
    transport = InProcessExecutionAPI().transport
    # The HTTP library of the in-process transport (httpx on 3.3, httpx2 on 3.4): a client of the
    # other one cannot drive it.
    httpx = importlib.import_module(type(transport).__module__.partition(".")[0])
    client = httpx.Client(transport=transport, base_url="http://in-process.invalid./")
    resp = client.patch(
        f"task-instances/{ti_id}/state",
        json={
            "state": "failed",
            "end_date": timezone.utcnow().isoformat(),
            "failure_cause": cause,
            "failure_reason": "reported by a worker",
        },
        headers={"Airflow-API-Version": "2026-11-30"},
    )
    assert resp.status_code in (200, 204), resp.text
    with _session() as session:
        ti = _ti(session, run_id, "r0")
        got = (ti.state, ti.max_tries, ti.infra_retry_count, ti.retry_delay_override, ti.failure_cause)
        assert got == expected
        assert ti.failure_reason == "reported by a worker"
