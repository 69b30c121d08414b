"""
AIP-97 on the worker path, end to end: real scheduler, dag-processor, api-server, LocalExecutor and
task processes (see conftest.py). Each test checks one failure path of the ``aip97w_causes`` Dag.
"""

from __future__ import annotations

import pytest
from harness import failure_lines

import lines

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

DAG = "aip97w_causes"
DONE = {"failed", "up_for_retry", "success"}


def _no_state_mismatch(stack, task_id: str) -> None:
    rows = stack.query(
        "SELECT extra FROM log WHERE event = 'state mismatch' AND dag_id = %(d)s AND task_id = %(t)s",
        d=DAG,
        t=task_id,
    )
    assert rows == [], f"the scheduler's state-mismatch path had to catch {task_id}: {rows}"


def _records(stack, name: str, task_id: str) -> list[dict]:
    """The task's records in ``name``, once there is one.

    The listener and the callbacks run after the state change the test waited for (the supervisor
    calls the listener once the Execution API recorded the failure; a failure callback runs after
    the task reported its state), so the test waits for their records, not only for the state.
    """
    return stack.wait_for(
        lambda: [r for r in stack.jsonl(name) if (r["dag_id"], r["task_id"]) == (DAG, task_id)],
        timeout=60,
        what=f"{task_id}'s record in {name}",
    )


def _listener_calls(stack, task_id: str) -> list[dict]:
    return _records(stack, "listener.jsonl", task_id)


def _callbacks(stack, task_id: str) -> list[dict]:
    return _records(stack, "callbacks.jsonl", task_id)


def _failure_line(stack, task_id: str) -> dict[str, str]:
    """The scheduler's one line for the task's failure: upstream's line, ending with the AIP-97 fields."""

    def found():
        return [
            r
            for r in failure_lines(stack.log_text("scheduler"))
            if (r.get("dag_id"), r.get("task_id")) == (DAG, task_id)
        ]

    (line,) = stack.wait_for(found, timeout=60, what=f"the scheduler's failure line for {task_id}", logs=("scheduler",))
    return line


def test_task_exception_is_application(stack):
    ti = stack.wait_ti(DAG, "raises", DONE, timeout=90)
    assert ti["state"] == "failed"
    assert ti["failure_cause"] == "application"
    assert ti["failure_reason"] == "ValueError: boom from task code"
    # The worker-side listener got the cause, and so did the failure callback's context.
    calls = _listener_calls(stack, "raises")
    assert [c["failure_cause"] for c in calls] == ["application"], calls
    callbacks = _callbacks(stack, "raises")
    assert [(c["try_number"], c["has_key"], c["failure_cause"]) for c in callbacks] == [
        (1, True, "application")
    ]
    _no_state_mismatch(stack, "raises")


def test_execution_timeout_is_timeout(stack):
    ti = stack.wait_ti(DAG, "times_out", DONE, timeout=90)
    assert ti["state"] == "failed"
    assert ti["failure_cause"] == "timeout"
    assert ti["failure_reason"].startswith("AirflowTaskTimeout")
    assert [c["failure_cause"] for c in _listener_calls(stack, "times_out")] == ["timeout"]
    assert [c["failure_cause"] for c in _callbacks(stack, "times_out")] == ["timeout"]


def _sigkill_evidence() -> str:
    """What the reason of a SIGKILL says on this machine: the OOM-kill counter, or why there is none."""
    from airflow.sdk.execution_time.oom_evidence import MemoryCgroup, find_memory_cgroup

    if isinstance(find_memory_cgroup(), MemoryCgroup):
        return "Not the kernel's OOM killer: the memory cgroup's oom_kill counter did not rise"
    return "Whether the kernel's OOM killer sent it is unknown: no memory cgroup OOM-kill counter could be read"


def _assert_sigkill_is_not_oom(reason: str) -> None:
    """A SIGKILL the task sent itself (``kill -9``, no OOM) is not oom; the reason states the evidence."""
    assert reason.startswith("Task process was killed by SIGKILL (9) before it reported a state.")
    assert _sigkill_evidence() in reason
    assert "most likely" not in reason


def test_task_raising_memoryerror_is_application(stack):
    """Negative control of the oom cause: the task's own MemoryError is application."""
    ti = stack.wait_ti(DAG, "raises_memory_error", DONE, timeout=90)
    assert ti["state"] == "failed"
    assert (ti["failure_cause"], ti["failure_reason"]) == (
        "application",
        "MemoryError: cannot allocate the lookup table",
    )


def test_task_process_sigkill_with_retries_goes_up_for_retry(stack):
    """Before AIP-97 nothing reported this try and the executor reported SUCCESS (state mismatch)."""
    ti = stack.wait_ti(DAG, "task_process_killed_retry", DONE, timeout=90)
    assert ti["state"] == "up_for_retry"
    assert ti["failure_cause"] == "unknown"
    _assert_sigkill_is_not_oom(ti["failure_reason"])
    # The archived try keeps the cause too.
    history = stack.query(
        f"SELECT try_number, state, failure_cause, failure_reason FROM {lines.PAST_TRIES} "
        "WHERE dag_id = %(d)s AND task_id = 'task_process_killed_retry'",
        d=DAG,
    )
    assert len(history) == 1 and history[0]["try_number"] == 1
    assert history[0]["failure_cause"] == "unknown"
    assert "SIGKILL" in history[0]["failure_reason"]
    _no_state_mismatch(stack, "task_process_killed_retry")
    # The task process could not call the listeners; the supervisor did, with the cause.
    assert [c["failure_cause"] for c in _listener_calls(stack, "task_process_killed_retry")] == ["unknown"]


def test_task_process_sigkill_without_retries_fails(stack):
    ti = stack.wait_ti(DAG, "task_process_killed", DONE, timeout=90)
    assert ti["state"] == "failed"
    assert ti["failure_cause"] == "unknown"
    _assert_sigkill_is_not_oom(ti["failure_reason"])
    _no_state_mismatch(stack, "task_process_killed")
    calls = _listener_calls(stack, "task_process_killed")
    assert [c["failure_cause"] for c in calls] == ["unknown"], calls
    assert "SIGKILL" in calls[0]["error"]


def test_supervisor_killed_is_infra_reported_by_the_executor(stack):
    ti = stack.wait_ti(DAG, "supervisor_killed", DONE, timeout=90)
    assert ti["state"] == "failed"
    assert ti["failure_cause"] == "infra"
    # Detected by the LocalExecutor (its reason, its executor event), not by the heartbeat timeout
    # (300 s here), whose reason would say "Heartbeat timeout". How fast: benchmarks/aip122_recovery.py.
    assert ti["failure_reason"].startswith("LocalExecutor worker process "), ti["failure_reason"]
    assert "died (killed by SIGKILL)" in ti["failure_reason"]
    line = _failure_line(stack, "supervisor_killed")
    assert line["failure_cause"] == "infra", line
    # Upstream's line for a failure an executor event ends, its text unchanged before the fields.
    assert "reported that the task instance" in line["message"], line
    # The scheduler path calls the listener with the cause.
    assert [c["failure_cause"] for c in _listener_calls(stack, "supervisor_killed")] == ["infra"]
