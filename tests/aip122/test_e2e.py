"""
End to end: tasks that lose their LocalExecutor worker, with real Airflow processes on PostgreSQL.

The directory's ``e2e_stack`` (api-server and Dag processor, see conftest.py) serves both tests;
each test starts its own scheduler with its own ``[core] max_infra_retries``:

* ``test_default_config_fails_like_upstream``: a scheduler with the default configuration -- the
  task whose worker is killed fails with ``retries=0``, no infrastructure retry, counter 0 (a lost
  worker's failure is the scheduler's to decide, so the api-server's setting plays no part);
* ``test_infra_retries_end_to_end``: a scheduler with ``max_infra_retries=1`` and
  ``infra_retry_delay=1`` while tasks kill their workers over and over. Every count must be exact:
  per task instance, in the history, and in the number of ``infra_retry=granted`` decisions logged.

Two schedulers racing to decide the *same* failure are tested in ``test_atomic_grants.py`` (two
schedulers each running their own task instances, as this test once did, cannot catch a failure
granted twice: each only decides the failures of its own task instances).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from harness import Stack, failure_lines, log_records

from lines import LIVE_TRIES, PAST_TRIES

FINISHED = {"success", "failed"}


def _tis(stack: Stack, dag_id: str) -> dict[tuple[str, int], dict[str, Any]]:
    rows = stack.query(
        "SELECT task_id, map_index, state, try_number, max_tries, infra_retry_count, failure_cause "
        f"FROM {LIVE_TRIES} WHERE dag_id = %(d)s",
        d=dag_id,
    )
    return {(r["task_id"], r["map_index"]): r for r in rows}


def _history(stack: Stack, dag_id: str) -> list[dict[str, Any]]:
    return stack.query(
        "SELECT task_id, map_index, try_number, state, failure_cause, infra_retry_count "
        f"FROM {PAST_TRIES} WHERE dag_id = %(d)s ORDER BY task_id, map_index, try_number",
        d=dag_id,
    )


@pytest.fixture
def scheduler(e2e_stack: Stack):
    """Start the test's one scheduler (``scheduler(name, config)``); stopped when the test ends."""
    started: list[str] = []

    def start(name: str, config: dict[str, str | None]) -> str:
        e2e_stack.start_component(
            "scheduler",
            name=name,
            config={"AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1", "AIRFLOW__CORE__PARALLELISM": "6", **config},
        )
        started.append(name)
        return name

    yield start
    for name in started:
        e2e_stack.stop(name)


def _decision_lines(text: str) -> list[dict[str, str]]:
    """The "Infrastructure retry decision" lines: grants (info) and denials other than configured ones."""
    return log_records(text, "Infrastructure retry decision:")


def _failure_lines(text: str) -> list[dict[str, str]]:
    """The scheduler's one line per failure, upstream's line with the AIP-97 fields (``infra_retry=outcome:reason``)."""
    return failure_lines(text)


def _wait_finished(stack: Stack, dag_id: str, expected: int, timeout: float):
    def done():
        tis = _tis(stack, dag_id)
        return tis if len(tis) == expected and all(t["state"] in FINISHED for t in tis.values()) else None

    return stack.wait_for(done, timeout=timeout, interval=1, what=f"{dag_id} finished ({_tis(stack, dag_id)})")


def _log_once(stack: Stack, name: str, ready, timeout: float = 30) -> str:
    """The log of ``name`` once ``ready(text)`` holds.

    The scheduler logs a failure's outcome line after the transaction that recorded it commits (it
    reports only what was recorded), so a test that saw the state in the database waits for the line
    before it stops the scheduler, else the stop can come between the commit and the line.
    """
    return stack.wait_for(
        lambda: (text := stack.log_text(name)) and ready(text) and text,
        timeout=timeout,
        what=f"the outcome lines in {name}'s log",
        logs=(name,),
    )


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_default_config_fails_like_upstream(e2e_stack: Stack, scheduler):
    stack = e2e_stack
    # The default configuration: none of the stack's infra-retry settings.
    name = scheduler(
        "scheduler-default",
        {"AIRFLOW__CORE__MAX_INFRA_RETRIES": None, "AIRFLOW__CORE__INFRA_RETRY_DELAY": None},
    )
    start = time.monotonic()
    stack.trigger("aip122_default")
    tis = _wait_finished(stack, "aip122_default", 1, 90)
    elapsed = time.monotonic() - start
    _log_once(stack, name, _failure_lines)
    stack.stop(name)
    text = stack.log_text(name)  # all it logged, up to its stop
    ti = tis[("kill_once", -1)]
    # retries=0 and infrastructure retries disabled: the lost worker fails the task, as in 3.3.2.
    assert ti["state"] == "failed"
    assert (ti["try_number"], ti["max_tries"], ti["infra_retry_count"]) == (1, 0, 0)
    assert ti["failure_cause"] == "infra"
    # A denial because the feature is off is no warning, and not a separate info line either: the
    # scheduler's one line for the failure carries it.
    assert _decision_lines(text) == []
    assert [(d["failure_cause"], d["infra_retry"]) for d in _failure_lines(text)] == [("infra", "denied:disabled")]
    print(f"default config: failed {elapsed:.1f}s after the trigger")


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_infra_retries_end_to_end(e2e_stack: Stack, scheduler):
    stack = e2e_stack
    name = scheduler(
        "scheduler-ha", {"AIRFLOW__CORE__MAX_INFRA_RETRIES": "1", "AIRFLOW__CORE__INFRA_RETRY_DELAY": "1"}
    )
    proc = stack.env.procs[name]
    stack.trigger("aip122_ha")
    tis = _wait_finished(stack, "aip122_ha", 8, 100)

    def outcomes_logged(text: str) -> bool:
        failures = [d for d in _failure_lines(text) if d["dag_id"] == "aip122_ha"]
        denials = [
            d for d in _decision_lines(text) if d["dag_id"] == "aip122_ha" and d["infra_retry"] == "denied"
        ]
        return any(d["task_id"] == "opt_out" for d in failures) and bool(denials)

    _log_once(stack, name, outcomes_logged)
    alive = proc.poll() is None
    stack.stop(name)
    logs = [stack.log_text(name)]  # all it logged, up to its stop: a late duplicate counts too
    assert alive, "the scheduler died during the test"

    def row(task_id, map_index=-1):
        r = tis[(task_id, map_index)]
        return r["state"], r["try_number"], r["max_tries"], r["infra_retry_count"]

    # retries=0, config cap 1: one lost worker, then success on the second try.
    assert row("kill_once") == ("success", 2, 1, 1)
    # The cap (max_infra_retries=2) holds under repeated kills: 2 infra retries, then failed.
    assert row("kill_always") == ("failed", 3, 2, 2)
    # max_infra_retries=0 beats the config: fails at once, like upstream.
    assert row("opt_out") == ("failed", 1, 0, 0)
    # An application failure spends the ordinary retry and never an infra retry.
    assert row("app_fail") == ("failed", 2, 1, 0)
    # Mapped task instances each have their own counter.
    for i in range(4):
        assert row("kill_twice", i) == ("success", 3, 2, 2), i

    # History: every retried lost try is archived with cause infra and the count as of its decision
    # (the last try of a task instance stays on its live row).
    hist = _history(stack, "aip122_ha")
    infra_tries = [h for h in hist if h["failure_cause"] == "infra"]
    assert len(infra_tries) == 1 + 2 + 4 * 2
    kill_always_hist = [
        (h["try_number"], h["infra_retry_count"]) for h in hist if h["task_id"] == "kill_always"
    ]
    assert kill_always_hist == [(1, 1), (2, 2)]

    # Each failure was decided exactly once.
    decisions = [d for text in logs for d in _decision_lines(text) if d["dag_id"] == "aip122_ha"]
    granted = [
        (d["task_id"], d["map_index"], d["try_number"]) for d in decisions if d["infra_retry"] == "granted"
    ]
    assert len(granted) == len(set(granted)) == 1 + 2 + 4 * 2
    denied = sorted((d["task_id"], d["reason"]) for d in decisions if d["infra_retry"] == "denied")
    assert denied == [("kill_always", "cap_reached")]
    # The opt-out is what the task asks for: no warning, only the scheduler's line for the failure.
    failures = [d for text in logs for d in _failure_lines(text) if d["dag_id"] == "aip122_ha"]
    opted_out = [(d["task_id"], d["infra_retry"]) for d in failures if d["infra_retry"].endswith(":task_opt_out")]
    assert opted_out == [("opt_out", "denied:task_opt_out")]

    # Listeners see failure_cause=infra with the state up_for_retry (the scheduler calls them after
    # the state change the test saw: wait for the record).
    heard = stack.wait_for(
        lambda: [
            (r["try_number"], r["state"], r["failure_cause"])
            for r in stack.jsonl("listener.jsonl")
            if r["dag_id"] == "aip122_ha" and r["task_id"] == "kill_once"
        ],
        timeout=30,
        what="the listener's record of kill_once",
    )
    assert heard == [(1, "up_for_retry", "infra")], heard

    # on_retry_callback fires for the infra retry with the cause in its context.
    def callbacks():
        got = [c for c in stack.jsonl("callbacks.jsonl") if c["task_id"] == "kill_once"]
        return got or None

    got = stack.wait_for(callbacks, timeout=30, what="kill_once retry callback")
    assert [(c["kind"], c["failure_cause"]) for c in got] == [("retry", "infra")]

    # REST API v2 (the stack's api-server) exposes the counter on the task instance and on each try.
    resp = stack.rest("GET", "/dags/aip122_ha/dagRuns/~/taskInstances")
    assert resp.status_code == 200, resp.text
    tis_api = resp.json()["task_instances"]
    run_id = tis_api[0]["dag_run_id"]
    resp = stack.rest("GET", f"/dags/aip122_ha/dagRuns/{run_id}/taskInstances/kill_always/tries")
    assert resp.status_code == 200, resp.text
    by_task = {(t["task_id"], t["map_index"]): t for t in tis_api}
    assert by_task[("kill_once", -1)]["infra_retry_count"] == 1
    assert by_task[("kill_twice", 2)]["infra_retry_count"] == 2
    assert sorted(t["infra_retry_count"] for t in resp.json()["task_instances"]) == [1, 2, 2]
