"""
Retry rules, infra-retry backoff and the storm guard on the real patched build (issue 36, "Tests that
exist but do not test their claim").

The rule tests fail task instances of ``dags/aip122_rules_db_dag.py`` (serialized into the in-process
PostgreSQL database by ``db_env``) through ``TaskInstance.handle_failure``, the path every scheduler
failure takes, and compare each task that has a rule with its twin ``no_rule`` (the same ``retries``
and ``retry_delay``): each asserts what the rule changes, so it fails without the rule. The in-patch
unit tests they stand beside (``test_retry_rule_spends_an_ordinary_retry_when_one_is_left``,
``test_retry_rule_falls_back_to_an_ordinary_retry_without_infra_budget``) pass with ``retries=1`` and
no rule at all.

The backoff is checked against numbers computed here, independently of the patch's function: the
formula of AIP-docs/retry-rules-and-causes.md ("Infra-retry backoff"): the first infrastructure retry
starts at once, the k-th from the second on waits ``d = min(cap, base * 2 ** (k - 1))``, jittered into ``[d / 2, d)`` by the
first 8 bytes of the SHA-256 of the failed try's ``dag_id, task_id, run_id, map_index, try_number``
joined by ``\\x1f``.
"""

from __future__ import annotations

import hashlib
import json
import logging

import _db
import pytest

# Import (and so configure) Airflow before any fixture touches logging; conftest set its environment.
import airflow  # noqa: F401
from lines import DEFAULT_LINE, LINE

pytestmark = [pytest.mark.usefixtures("db_env"), pytest.mark.requires_feature("retry-rules")]

DAG_ID = "aip122_rules_db"
NO_RULE = "no_rule"


def _dag(session):
    return _db.dag(session, DAG_ID)


def _new_run(session) -> str:
    return _db.new_run(session, "rules", DAG_ID)


def _ti(session, run_id: str, task_id: str):
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance as TI

    ti = session.scalar(
        select(TI).where(TI.dag_id == DAG_ID, TI.run_id == run_id, TI.task_id == task_id, TI.map_index == -1)
    )
    session.refresh(ti)
    return ti


def _fail_tries(task_id: str, causes: list[str]) -> list[dict]:
    """Start and fail one try per cause, as the scheduler does; return the live row after each failure."""
    from airflow.utils.state import TaskInstanceState

    after = []
    with _db.session() as session:
        run_id = _new_run(session)
        for cause in causes:
            ti = _ti(session, run_id, task_id)
            if LINE == DEFAULT_LINE:
                ti.try_number += 1
            elif ti.try_number == 0:
                ti.try_number = 1  # 3.4: a retry's pending row already carries its try number
            ti.state = TaskInstanceState.RUNNING
            ti.retry_delay_override = None  # ti_run clears it when a try starts
            ti.task = _dag(session).get_task(task_id)
            session.commit()
            seed = f"{ti.dag_id}\x1f{ti.task_id}\x1f{ti.run_id}\x1f{ti.map_index}\x1f{ti.try_number}"
            ti.handle_failure(
                error=f"try {ti.try_number} failed ({cause})", session=session, failure_cause=cause
            )
            session.commit()
            live = _ti(session, run_id, task_id)
            after.append(
                {
                    "state": live.state,
                    "retry_delay_override": live.retry_delay_override,
                    "retry_reason": live.retry_reason,
                    "infra_retry_count": live.infra_retry_count,
                    "max_tries": live.max_tries,
                    "seed": seed,
                }
            )
            if live.state == TaskInstanceState.FAILED:
                break
    return after


@pytest.fixture
def no_infra_retries(monkeypatch):
    """AIP-122 off (``[core] max_infra_retries = 0``, the default), as in a deployment that never set it."""
    monkeypatch.setenv("AIRFLOW__CORE__MAX_INFRA_RETRIES", "0")


# --- A RETRY rule on the no-exception path: the rule's effect, against the no-rule twin -------------------


def test_retry_rule_spends_an_ordinary_retry_with_its_own_delay(no_infra_retries):
    """Precedence row 4: a RETRY rule on ``unknown`` retries with the rule's delay and spends the one retry."""
    baseline = _fail_tries(NO_RULE, ["unknown", "unknown"])
    ruled = _fail_tries("unknown_rule", ["unknown", "unknown"])
    # Without a rule: an ordinary retry, on the task's own retry_delay (no override, no reason).
    assert [(t["state"], t["retry_delay_override"], t["retry_reason"]) for t in baseline] == [
        ("up_for_retry", None, None),
        ("failed", None, None),
    ]
    # With the rule: the retry waits the rule's 2 minutes and says which rule decided; it is an
    # ordinary retry (the second failure has none left), never an infrastructure one.
    assert [(t["state"], t["retry_delay_override"], t["retry_reason"]) for t in ruled] == [
        ("up_for_retry", 120.0, "rules[0] (cause=unknown) -> retry"),
        ("failed", None, "rules[0] (cause=unknown) -> retry"),
    ]
    assert [t["infra_retry_count"] for t in ruled] == [0, 0]
    assert ruled[-1]["max_tries"] == baseline[-1]["max_tries"] == 1


def test_infra_retry_rule_falls_back_to_an_ordinary_retry_without_infra_budget(no_infra_retries):
    """Precedence row 3: no infra retry to grant (AIP-122 off), so the rule's RETRY spends an ordinary one."""
    baseline = _fail_tries(NO_RULE, ["infra", "infra"])
    ruled = _fail_tries("infra_rule", ["infra", "infra"])
    assert [(t["state"], t["retry_delay_override"], t["retry_reason"]) for t in baseline] == [
        ("up_for_retry", None, None),
        ("failed", None, None),
    ]
    assert [t["state"] for t in ruled] == ["up_for_retry", "failed"]
    # The rule decided (its name is the try's reason) and its 42 s delay is the retry's; no
    # infrastructure retry was counted, the one ordinary retry was spent.
    assert ruled[0]["retry_reason"] == "rules[0] (cause=infra) -> retry"
    assert ruled[0]["retry_delay_override"] == 42.0
    assert [t["infra_retry_count"] for t in ruled] == [0, 0]


# --- Infra-retry backoff: exact values -----------------------------------------------------------------


def _expected_backoff(*, base: float, cap: float, retry_number: int, seed: str) -> float:
    """The documented formula, written out here (not the patch's function)."""
    if retry_number == 1:
        return 0.0  # the first infrastructure retry starts at once
    step = min(cap, base * 2 ** (retry_number - 1))
    fraction = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big") / 2**64
    return step / 2 + fraction * step / 2


# (retry_number, seed, expected): base 5 s, cap 300 s. Each expected value was computed by hand from
# the SHA-256 of the seed (its first 8 bytes as a fraction of 2**64, in brackets):
#   1st retry: none, it starts at once (before issue 39: step 5, 2.5 + 0.91333 * 2.5 = 4.78333)
#   2nd retry: step 10, [0xcf3670cd51cd2016 = 0.80942...] -> 5 + 0.80942 * 5  = 9.04712
#   3rd retry: step 20, [0x2462393e0cd3e409 = 0.14212...] -> 10 + 0.14212 * 10 = 11.42124
#   7th retry: step min(300, 320) = 300, [0x127fb96979ef16c0 = 0.07226...] -> 150 + 0.07226 * 150 = 160.83921
#   2nd retry of map index 0: [0x86ccb3e2245a488f = 0.52656...] -> 5 + 0.52656 * 5 = 7.63281
EXACT = [
    (1, "d\x1ft\x1fr\x1f-1\x1f1", 0.0),
    (2, "d\x1ft\x1fr\x1f-1\x1f2", 9.047122240671348),
    (3, "d\x1ft\x1fr\x1f-1\x1f3", 11.421237732400439),
    (7, "d\x1ft\x1fr\x1f-1\x1f7", 160.83921264425052),
    (2, "d\x1ft\x1fr\x1f0\x1f2", 7.632805074264764),
]


@pytest.mark.parametrize(("retry_number", "seed", "expected"), EXACT)
def test_backoff_jitter_has_exact_values(retry_number, seed, expected):
    from airflow.models.taskinstance_infra_retry import infra_retry_backoff

    assert _expected_backoff(base=5.0, cap=300.0, retry_number=retry_number, seed=seed) == pytest.approx(
        expected, abs=1e-9
    )
    assert infra_retry_backoff(
        base=5.0, max_delay=300.0, retry_number=retry_number, seed=seed
    ) == pytest.approx(expected, abs=1e-9)


def test_backoff_seed_is_the_failed_tries_identity():
    from types import SimpleNamespace

    from airflow.models.taskinstance_infra_retry import backoff_seed

    ti = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=-1, try_number=2)
    assert backoff_seed(ti) == "d\x1ft\x1fr\x1f-1\x1f2"


def test_each_grant_carries_the_backoff_of_its_ordinal(monkeypatch):
    """Three infra retries of ``backoff`` (base 5 s, cap 12 s): each grant's delay is the formula's, exactly."""
    monkeypatch.delenv("AIRFLOW__CORE__MAX_INFRA_RETRIES", raising=False)
    tries = _fail_tries("backoff", ["infra"] * 4)
    assert [t["state"] for t in tries] == ["up_for_retry"] * 3 + ["failed"]
    assert [t["infra_retry_count"] for t in tries[:3]] == [1, 2, 3]
    expected = [
        _expected_backoff(base=5.0, cap=12.0, retry_number=k, seed=t["seed"])
        for k, t in enumerate(tries[:3], 1)
    ]
    # Written out: the first starts at once, the second in [5, 10), the third, capped, in [6, 12).
    assert expected[0] == 0.0
    assert 5.0 <= expected[1] < 10.0
    assert 6.0 <= expected[2] < 12.0
    assert [t["retry_delay_override"] for t in tries[:3]] == pytest.approx(expected, abs=1e-6)


# --- The storm guard: release, and odd queue names -----------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _guard(threshold: int, window: float, clock):
    from airflow.jobs.infra_retry_storm_guard import InfraRetryStormGuard, StormGuardSettings

    return InfraRetryStormGuard(
        "LocalExecutor", StormGuardSettings(threshold=threshold, window=window), clock=clock
    )


def _clear_guard_state(session) -> None:
    from sqlalchemy import delete

    from airflow.models.infra_retry_storm_guard import InfraRetryStormGuardState

    session.execute(delete(InfraRetryStormGuardState))
    session.commit()


def test_the_guard_releases_the_queue_the_storm_used():
    clock = _Clock()
    guard = _guard(4, 20, clock)
    with _db.session() as session:
        _clear_guard_state(session)
        for _ in range(6):
            guard.plan("spot", 1.0).commit(session=session)
        assert guard.is_engaged("spot", session=session)
        clock.now += 5
        guard.release_expired(session=session)
        assert guard.is_engaged("spot", session=session)  # the failures are still in the window
        clock.now += 16  # every failure has left the window
        guard.release_expired(session=session)
        assert guard.is_engaged("spot", session=session) is False
        assert not guard.plan("spot", 1.0).commit(session=session).held


def test_two_guards_share_the_state_on_postgresql():
    """Two schedulers' guards of one executor, each on its own connection: one window, one slot sequence."""
    import threading

    clock = _Clock()
    guards = [_guard(4, 20, clock), _guard(4, 20, clock)]
    with _db.session() as session:
        _clear_guard_state(session)
    plans = []
    lock = threading.Lock()

    def fail(guard, n):
        with _db.session() as session:
            for _ in range(n):
                plan = guard.plan("shared", 1.0).commit(session=session)
                with lock:
                    plans.append(plan)

    threads = [threading.Thread(target=fail, args=(g, 10)) for g in guards]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 20 failures counted together: engaged once, on the 4th, whichever guard recorded it.
    assert sum(p.transition == "engaged" for p in plans) == 1
    # The held retries' slots are one sequence 5 s apart, none handed out twice (the row lock).
    starts = sorted(p.now + p.delay for p in plans if p.held)
    assert len(starts) == 16
    assert all(b - a == pytest.approx(5.0) for a, b in zip(starts, starts[1:]))


#: Before issue 36 §5 the guard put the queue as it is in the metric tag and the log field.
ODD_QUEUES = [
    pytest.param("team.a.spot", id="dots"),  # dots are valid tag characters: kept as they are
    pytest.param("spot pool", id="space"),
    pytest.param("spöt-ü-队列", id="unicode"),
    pytest.param("q" * 300 + " x", id="long"),
    pytest.param("a,b=c|d:e#f", id="tag-separators"),
    pytest.param("line\nbreak", id="newline"),
]


@pytest.mark.parametrize("queue", ODD_QUEUES)
def test_odd_queue_names_give_valid_metric_tags_and_one_log_field(queue, monkeypatch):
    from airflow._shared.observability.metrics.validators import ALLOWED_CHARACTERS
    from airflow.jobs import infra_retry_storm_guard

    tags = []
    monkeypatch.setattr(
        infra_retry_storm_guard.stats, "incr", lambda name, *a, **kw: tags.append(kw.get("tags"))
    )
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("airflow.jobs.infra_retry_storm_guard")
    logger.addHandler(handler)
    try:
        clock = _Clock()
        guard = _guard(2, 10, clock)
        with _db.session() as session:
            _clear_guard_state(session)
            for _ in range(2):
                guard.plan(queue, 1.0).commit(session=session)
            assert guard.is_engaged(queue, session=session)
            clock.now += 11
            guard.release_expired(session=session)
    finally:
        logger.removeHandler(handler)
    assert len(tags) == 2, tags  # engaged, released
    for tag in tags:
        # StatsD with InfluxDB tags drops the whole stat when a tag value holds another character
        # (as the rule tags, ``rules.<index>``, already avoid).
        assert set(tag["queue"]) <= ALLOWED_CHARACTERS, tag
    lines = [r.getMessage() for r in records]
    assert len(lines) == 2, lines
    for line in lines:
        # One line, and the queue one field a key=value parser reads back: plain when it has no
        # whitespace, else JSON-quoted (as the failure line's failure_reason).
        assert "\n" not in line
        value = line.split(" queue=", 1)[1].split(" infra_failures=", 1)[0]
        assert value, line
        if value.startswith('"'):
            assert json.loads(value) == queue, line
        else:
            assert value == queue, line
            assert not any(c.isspace() for c in value), line
