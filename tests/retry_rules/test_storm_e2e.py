"""
End to end: the infrastructure-retry storm guard (real api-server, Dag processor, scheduler, PostgreSQL).

40 tasks whose every try is lost as ``infra`` while their Dag's storm is on: the executor
(``pythonpath/storm_executor.py``, a LocalExecutor) reports each try it receives failed with the
cause ``infra`` instead of running it, as a Kubernetes executor does for the pods of a node pool that
went away, and logs when each try arrived. ``[core] max_infra_retries=5``, ``infra_retry_delay=1``,
a backoff capped at 2 s (each task's own ``max_infra_retry_delay=2``; ``[core] max_infra_retry_delay``,
which also bounds how long the guard holds a retry, is 60 s, above the storm's 24 s); the guard is
configured small for the test (8 failures in 8 s).

1. **Without the guard** (threshold 0): every task burns its five infrastructure retries within
   seconds and fails -- its budget lost to the storm.
2. **With the guard**: it engages (one log line), held retries start at most 8 per 8 s, no task
   reaches its cap; the storm ends, the guard releases by itself (one log line) and every task
   completes, each with exactly one infrastructure retry counted per try it lost.

3. **With the guard and two schedulers** (``test_the_bound_holds_across_two_schedulers``): the
   guard's state is in the metadata database, so the two schedulers engage it together (once, one
   line between them), pace one queue at the same 8 per 8 s together -- not 8 per 8 s each -- and it
   releases once; every task completes.

The test prints the tries started per minute of each run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from harness import Stack
from lines import LIVE_TRIES, PAST_TRIES

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

N_TASKS = 40
CAP = 5
THRESHOLD = 8
WINDOW = 8.0
STORM_SECONDS = 24.0

COMMON = {
    "AIRFLOW__CORE__PARALLELISM": "12",
    "AIRFLOW__CORE__MAX_INFRA_RETRIES": str(CAP),
    "AIRFLOW__CORE__INFRA_RETRY_DELAY": "1",
    # Bounds the guard's hold: above STORM_SECONDS, so that the pacing alone bounds the storm here.
    "AIRFLOW__CORE__MAX_INFRA_RETRY_DELAY": "60",
    "AIRFLOW__SCHEDULER__INFRA_RETRY_STORM_WINDOW": str(WINDOW),
    "AIRFLOW__SCHEDULER__MAX_TIS_PER_QUERY": "64",
}


@pytest.fixture(scope="module")
def stack(retry_rules_stack) -> Iterator[Stack]:
    """api-server and Dag processor with the storm executor; the test starts a scheduler per guard setting."""
    with retry_rules_stack(
        dag_files=["storm_dags.py"],
        config=COMMON,
        executor="storm_executor.StormExecutor",
        components=("api-server", "dag-processor"),
    ) as stack:
        yield stack


def _tries(stack, dag_id: str) -> list[dict]:
    return [t for t in stack.jsonl("tries.jsonl") if t["dag_id"] == dag_id]


def _per_minute(times: list[float]) -> float:
    if len(times) < 2:
        return 0.0
    return len(times) / (max(times) - min(times)) * 60


def _max_in_window(times: list[float], window: float) -> int:
    times = sorted(times)
    best, start = 0, 0
    for end, t in enumerate(times):
        while times[start] <= t - window:
            start += 1
        best = max(best, end - start + 1)
    return best


def _states(stack, dag_id: str) -> dict[str, dict]:
    rows = stack.query(
        f"SELECT task_id, state, try_number, infra_retry_count FROM {LIVE_TRIES} WHERE dag_id = %(d)s",
        d=dag_id,
    )
    return {r["task_id"]: r for r in rows}


def _guarded_storm(stack: Stack, dag_id: str, schedulers: list[str]):
    """Run ``dag_id`` through a storm of STORM_SECONDS; wait until every task finished and the guard released."""
    stack.trigger(dag_id)
    stack.wait_for(lambda: _tries(stack, dag_id), timeout=120, what="the first guarded try")
    storm_start = min(t["t"] for t in _tries(stack, dag_id))
    time.sleep(max(0.0, storm_start + STORM_SECONDS - time.time()))
    (stack.out / f"storm-{dag_id}").unlink()
    storm_end = time.time()
    done = stack.wait_for(
        lambda: (
            (s := _states(stack, dag_id))
            and all(t["state"] in ("success", "failed") for t in s.values())
            and len(s) == N_TASKS
            and s
        ),
        timeout=300,
        interval=1,
        what="every guarded task finished",
    )
    logs = stack.wait_for(
        lambda: (
            (texts := [stack.log_text(name) or "" for name in schedulers])
            and any("Infrastructure retry storm guard released" in text for text in texts)
            and texts
        ),
        timeout=60,
        what="the guard's release line",
    )
    return storm_start, storm_end, done, logs


def test_storm_guard_bounds_the_tries_and_loses_no_budget(stack: Stack) -> None:
    # --- 1. Without the guard --------------------------------------------------------------
    dag_id = "storm_unguarded"
    (stack.out / f"storm-{dag_id}").touch()
    stack.start_component(
        "scheduler",
        name="scheduler-unguarded",
        config={"AIRFLOW__SCHEDULER__INFRA_RETRY_STORM_THRESHOLD": "0"},
    )
    try:
        stack.trigger(dag_id)
        all_failed = stack.wait_for(
            lambda: (
                (s := _states(stack, dag_id))
                and len(s) == N_TASKS
                and all(t["state"] == "failed" for t in s.values())
                and s
            ),
            timeout=240,
            interval=1,
            what="every unguarded task failed",
        )
    finally:
        stack.stop("scheduler-unguarded")
    unguarded_times = [t["t"] for t in _tries(stack, dag_id)]
    unguarded_rate = _per_minute(unguarded_times)
    # Each task spent its whole infrastructure allowance on the storm and failed.
    assert {t["infra_retry_count"] for t in all_failed.values()} == {CAP}
    assert len(unguarded_times) == N_TASKS * (CAP + 1)

    # --- 2. With the guard ----------------------------------------------------------------
    dag_id = "storm_guarded"
    flag = stack.out / f"storm-{dag_id}"
    flag.touch()
    stack.start_component(
        "scheduler",
        name="scheduler-guarded",
        config={"AIRFLOW__SCHEDULER__INFRA_RETRY_STORM_THRESHOLD": str(THRESHOLD)},
    )
    try:
        storm_start, storm_end, done, (log,) = _guarded_storm(stack, dag_id, ["scheduler-guarded"])
    finally:
        stack.stop("scheduler-guarded")

    tries = _tries(stack, dag_id)
    lost = [t["t"] for t in tries if t["lost"]]
    retries_in_storm = [t["t"] for t in tries if t["lost"] and t["try_number"] > 1 and t["t"] <= storm_end]
    guarded_rate = _per_minute([t for t in lost if t <= storm_end])
    print(
        f"\ntries started per minute while every try is lost: without the guard {unguarded_rate:.0f} "
        f"({len(unguarded_times)} tries in {max(unguarded_times) - min(unguarded_times):.1f} s), "
        f"with the guard {guarded_rate:.0f} ({len(lost)} tries in {storm_end - storm_start:.1f} s); "
        f"most retries started in any {WINDOW:g} s window with the guard: "
        f"{_max_in_window(retries_in_storm, WINDOW)} (threshold {THRESHOLD}); retries during the guarded "
        f"storm: {len(retries_in_storm)} (bound {STORM_SECONDS * THRESHOLD / WINDOW + THRESHOLD:g})"
    )

    # The guard engaged and released once each, with one line each.
    engaged = re.findall(r"Infrastructure retry storm guard engaged: executor=(\S+) queue=(\S+)", log)
    released = re.findall(r"Infrastructure retry storm guard released: executor=(\S+) queue=(\S+)", log)
    assert engaged == [("storm_executor.StormExecutor", "default")]
    assert released == [("storm_executor.StormExecutor", "default")]
    assert re.search(r"Infrastructure retry decision: infra_retry=granted .* held_for=[1-9]", log)

    # The bound: held retries become due at release slots WINDOW / THRESHOLD apart, so during the
    # storm at most STORM_SECONDS / spacing of them start; the retries granted before the guard
    # engaged (fewer than THRESHOLD failures) come on top, once. (A scheduler loop that stalls can
    # start several due retries together, so the bound is over the storm, not per instant.)
    bound = STORM_SECONDS * THRESHOLD / WINDOW + THRESHOLD
    assert len(retries_in_storm) <= bound, (len(retries_in_storm), bound)
    bound_per_minute = bound / STORM_SECONDS * 60
    assert unguarded_rate > 2 * bound_per_minute, (unguarded_rate, bound_per_minute)

    # No budget lost: every task completed, no infrastructure retry was denied, and each counted
    # retry is one try the storm took.
    assert {t["state"] for t in done.values()} == {"success"}
    assert "infra_retry=denied" not in log
    lost_tries = stack.query(
        f"SELECT task_id, count(*) AS n FROM {PAST_TRIES} WHERE dag_id = %(d)s AND failure_cause = 'infra' "
        "GROUP BY task_id",
        d=dag_id,
    )
    lost_by_task = {r["task_id"]: r["n"] for r in lost_tries}
    for task_id, ti in done.items():
        assert ti["infra_retry_count"] == lost_by_task.get(task_id, 0) < CAP, (task_id, ti)
        assert ti["try_number"] == ti["infra_retry_count"] + 1


def test_the_bound_holds_across_two_schedulers(stack: Stack) -> None:
    """The guard's state is shared: two schedulers pace one queue at THRESHOLD per WINDOW together."""
    dag_id = "storm_guarded_two_schedulers"
    (stack.out / f"storm-{dag_id}").touch()
    names = ["scheduler-ha-a", "scheduler-ha-b"]
    for name in names:
        stack.start_component(
            "scheduler", name=name, config={"AIRFLOW__SCHEDULER__INFRA_RETRY_STORM_THRESHOLD": str(THRESHOLD)}
        )
    try:
        storm_start, storm_end, done, logs = _guarded_storm(stack, dag_id, names)
    finally:
        for name in names:
            stack.stop(name)

    tries = _tries(stack, dag_id)
    retries_in_storm = [t["t"] for t in tries if t["lost"] and t["try_number"] > 1 and t["t"] <= storm_end]
    bound = STORM_SECONDS * THRESHOLD / WINDOW + THRESHOLD
    grants = [len(re.findall(r"Infrastructure retry decision: infra_retry=granted", log)) for log in logs]
    print(
        f"\ntwo schedulers: retries during the guarded storm: {len(retries_in_storm)} (bound for the "
        f"deployment {bound:g}; per scheduler, as before the state was shared: {2 * bound:g}); most in any "
        f"{WINDOW:g} s window: {_max_in_window(retries_in_storm, WINDOW)}; grants per scheduler: {grants}"
    )
    # Both schedulers decided failures of the storm.
    assert all(n > 0 for n in grants), grants
    # Engaged and released once for the deployment, whichever scheduler found it.
    engaged = [
        m
        for log in logs
        for m in re.findall(r"Infrastructure retry storm guard engaged: executor=(\S+) queue=(\S+)", log)
    ]
    released = [
        m
        for log in logs
        for m in re.findall(r"Infrastructure retry storm guard released: executor=(\S+) queue=(\S+)", log)
    ]
    assert engaged == [("storm_executor.StormExecutor", "default")]
    assert released == [("storm_executor.StormExecutor", "default")]
    assert any(re.search(r"held_for=[1-9]", log) for log in logs)
    # The bound is the deployment's: the same as one scheduler's, not twice it.
    assert len(retries_in_storm) <= bound, (len(retries_in_storm), bound)
    # No budget lost.
    assert {t["state"] for t in done.values()} == {"success"}
    assert not any("infra_retry=denied" in log for log in logs)
