"""
End to end: the worker-side guarantees that make ``[core] max_infra_retries`` safe to turn on.

On the directory's ``e2e_stack`` (api-server and Dag processor with ``max_infra_retries = 1``,
``infra_retry_delay = 1``, see conftest.py) this module runs one scheduler with the LocalExecutor and
the same settings. The heartbeat timeout is 300 s, so every failure below is seen by the path under
test. Dags: ``dags/aip122_guarantee_dags.py``.

* No second copy of a try: a task that SIGKILLs its supervisor on try 1 and keeps running task code
  must stop running task code before try 2 starts (the task process dies with its supervisor).
* Trust boundary: ``failure_cause="infra"`` forged by task code over the supervisor channel, or sent
  by any worker straight to the Execution API route, is recorded as ``unknown`` and never earns an
  infra retry; the supervisor says so in the task's log.
* Callbacks of a killed task process run exactly once each, in the Dag processor, with the cause and
  the reason in their context, and its retry and failure e-mails are sent once each.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import FINISHED, Stack, process_gone, read_jsonl

from lines import LIVE_TRIES, PAST_TRIES

HERE = Path(__file__).resolve().parent
PROBE = HERE / "_route_spoof_probe.py"
TRY_COLUMNS = "try_number, state, start_date, end_date, failure_cause, failure_reason, infra_retry_count"
#: What the supervisor logs in the task's log when it downgrades a cause the task process sent.
DOWNGRADE_WARNING = "The task process reported a failure cause it has no evidence for; forwarding it as unknown"


@pytest.fixture(scope="module")
def stack(e2e_stack: Stack) -> Iterator[Stack]:
    """The shared stack plus this module's scheduler (``max_infra_retries = 1`` from the stack)."""
    e2e_stack.start_component("scheduler", name="scheduler", config={"AIRFLOW__CORE__PARALLELISM": "4"})
    yield e2e_stack
    e2e_stack.stop("scheduler")


def _tries(stack: Stack, dag_id: str) -> list[dict[str, Any]]:
    """Every try of the Dag's one task instance: archived tries first, then the live row."""
    return stack.tries(dag_id, columns=TRY_COLUMNS)


def _wait_finished(stack: Stack, dag_id: str, timeout: float) -> dict[str, Any]:
    return stack.wait_for(
        lambda: (ti := stack.ti(dag_id)) and ti["state"] in FINISHED and ti,
        timeout=timeout,
        what=f"{dag_id} finished",
        logs=("scheduler", "dag-processor"),
    )


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_no_second_copy_of_a_try_after_a_lost_supervisor(stack: Stack):
    dag_id = "aip122_no_second_copy"
    stack.trigger(dag_id)
    ti = _wait_finished(stack, dag_id, timeout=120)
    tries = _tries(stack, dag_id)
    assert [(t["try_number"], t["failure_cause"]) for t in tries] == [(1, "infra"), (2, None)], tries
    assert ti["state"] == "success" and ti["infra_retry_count"] == 1
    # Try 1's task process is gone (it would otherwise write for 30 s), so every write it made is in
    # the file now.
    (try1_pid,) = {r["pid"] for r in stack.jsonl("copy.jsonl") if r["try"] == 1}
    assert process_gone(try1_pid), f"try 1's task process {try1_pid} is still running"
    records = stack.jsonl("copy.jsonl")
    try1 = [r["t"] for r in records if r["try"] == 1]
    try2_start = [r["t"] for r in records if r["try"] == 2 and r.get("start")]
    assert any(r["try"] == 1 and r.get("before_kill") for r in records), "try 1 never ran its task code"
    assert len(try2_start) == 1, records[-5:]
    # The live row's start_date is try 2's start, as the Execution API recorded it.
    try2_db_start = ti["start_date"].timestamp()
    last_try1 = max(try1)
    assert last_try1 < try2_db_start, (
        f"try 1 was still running task code {last_try1 - try2_db_start:.1f}s after try 2 started"
    )
    assert last_try1 < try2_start[0]
    print(
        f"try 1 wrote {len(try1)} times; its last write was {try2_start[0] - last_try1:.1f}s "
        "before try 2's task code started"
    )


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_task_code_cannot_forge_infra_over_the_supervisor_channel(stack: Stack):
    dag_id = "aip122_spoof"
    stack.trigger(dag_id)
    # The retry decision is taken in the transaction that records the failure: a (wrongly) granted
    # retry would show as up_for_retry, then as try 2, never as try 1 failed.
    ti = _wait_finished(stack, dag_id, timeout=90)
    assert ti["failure_cause"] == "unknown", ti
    assert ti["failure_reason"] == "forged by task code"
    assert ti["state"] == "failed"
    assert (ti["try_number"], ti["max_tries"], ti["infra_retry_count"]) == (1, 0, 0)
    assert stack.query(f"SELECT 1 FROM {PAST_TRIES} WHERE dag_id = %(d)s", d=dag_id) == []
    # The supervisor logged the downgrade, as a warning, in the task's log (JSON lines).
    task_logs = [p for p in (stack.home / "logs").rglob("*.log") if f"dag_id={dag_id}" in str(p)]
    warnings = [
        (r.get("level"), r.get("reported_failure_cause"), r.get("failure_cause"))
        for path in task_logs
        for r in read_jsonl(path)
        if r.get("event") == DOWNGRADE_WARNING
    ]
    assert warnings == [("warning", "infra", "unknown")], task_logs


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_worker_reported_infra_at_the_route_is_unknown_and_never_granted(stack: Stack):
    dag_id = "aip122_route_probe"
    stack.trigger(dag_id)
    for task_id in ("probe_failed", "probe_retry"):
        stack.wait_for(
            lambda t=task_id: stack.query(
                f"SELECT 1 FROM {LIVE_TRIES} WHERE dag_id = %(d)s AND task_id = %(t)s AND state = 'success'",
                d=dag_id,
                t=t,
            ),
            timeout=90,
            what=f"{task_id} success",
        )
        # The probe puts the TIs back to running: the scheduler must have consumed the executor's
        # event first, or it would see a running TI and fail it (state mismatch).
        stack.wait_for(
            lambda t=task_id: f"TaskInstance Finished: dag_id={dag_id}, task_id={t},"
            in stack.log_text("scheduler"),
            timeout=60,
            what=f"the scheduler to process the executor event of {task_id}",
        )
    result = stack.env.run_python(PROBE.read_text(), timeout=120)
    probe = json.loads(result.stdout.strip().splitlines()[-1])

    failed = probe["probe_failed"]
    assert failed["status"] == 204, failed
    assert failed["ti"]["state"] == "failed"
    assert failed["ti"]["failure_cause"] == "unknown"
    assert failed["ti"]["failure_reason"] == "forged"
    assert (failed["ti"]["try_number"], failed["ti"]["max_tries"], failed["ti"]["infra_retry_count"]) == (
        probe["probe_failed_before"]["try_number"],
        0,
        0,
    )

    retry = probe["probe_retry"]
    assert retry["status"] == 204, retry
    # The worker asked for a retry: it keeps the ordinary decision, but no infra allowance is spent.
    assert retry["ti"]["failure_cause"] == "unknown"
    assert retry["ti"]["failure_reason"] == "forged retry"
    assert (retry["ti"]["max_tries"], retry["ti"]["infra_retry_count"]) == (0, 0), retry["ti"]
    assert "recorded as unknown" in result.stdout + result.stderr


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_callbacks_of_a_killed_task_process_run_once_each_in_the_dag_processor(stack: Stack):
    dag_id = "aip122_killed_callbacks"
    stack.trigger(dag_id)
    ti = _wait_finished(stack, dag_id, timeout=120)
    assert ti["state"] == "failed" and ti["try_number"] == 2

    def both():
        got = [c for c in stack.jsonl("killed_callbacks.jsonl") if c["task_id"] == "oom_killed"]
        return got if len(got) >= 2 else None

    stack.wait_for(both, timeout=60, what="the retry and the failure callback", logs=("dag-processor",))
    time.sleep(10)  # a grace period: a duplicate would show up here
    got = [c for c in stack.jsonl("killed_callbacks.jsonl") if c["task_id"] == "oom_killed"]
    assert [(c["kind"], c["try_number"], c["failure_cause"]) for c in got] == [
        ("retry", 1, "unknown"),
        ("failure", 2, "unknown"),
    ], got
    for c in got:
        assert "SIGKILL" in (c["reason"] or ""), c
    # Both ran in the Dag processor (where scheduler-initiated task callbacks run), not in the
    # task processes, which were dead. (Its logs of this module's Dag file: the shared stack's Dag
    # processor runs test_e2e.py's callbacks too.)
    callback_logs = [
        p.read_text(errors="replace")
        for p in (stack.home / "logs").rglob("*.log")
        if "dag_processor" in str(p) and "aip122_guarantee_dags" in p.name
    ]
    assert sum(text.count("Executing Task callback at index 0: callback") for text in callback_logs) == 2
    # email_on_retry / email_on_failure behave as for any failed try: one e-mail each, sent by the
    # Dag processor (the task process was dead).
    emails = [e for e in stack.jsonl("emails.jsonl") if "oom_killed" in e["subject"]]
    assert len(emails) == 2, emails
    assert [e["to"] for e in emails] == [["ops@example.invalid"]] * 2
    assert "Try 1 out of 2" in emails[0]["html"] and "Try 2 out of 2" in emails[1]["html"], emails
    assert all("SIGKILL" in e["html"] for e in emails)
    history = stack.query(
        f"SELECT try_number, state, failure_cause FROM {PAST_TRIES} WHERE dag_id = %(d)s", d=dag_id
    )
    assert [(h["try_number"], h["failure_cause"]) for h in history] == [(1, "unknown")]
