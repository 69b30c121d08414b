"""
The worker-side AIP-97 classification rules, checked directly (no Airflow processes).

Run in a subprocess with a private AIRFLOW_HOME, because importing Airflow reads its configuration.
"""

from __future__ import annotations

import pytest
from harness import run_isolated_script

pytestmark = pytest.mark.timeout(120)

SCRIPT = r"""
import json, signal
from airflow.sdk.exceptions import (
    AirflowException, AirflowFailException, AirflowSensorTimeout, AirflowTaskTerminated, AirflowTaskTimeout,
)
from airflow.sdk.execution_time.failure_classification import (
    classify_task_exception, describe_exception, describe_process_exit,
)
from airflow.sdk.execution_time.supervisor import TaskProcessOutcome, supervise_task
from airflow.executors.local_worker_reports import failure_from_task_exit, worker_death_failure
from airflow.sdk.execution_time.failure_classification import cause_from_task_process
from airflow.sdk.execution_time.parent_death import task_process_dies_with_supervisor

errors = {
    "timeout": AirflowTaskTimeout("Timeout, PID: 1"),
    "sensor_timeout": AirflowSensorTimeout("Sensor has timed out"),
    "value_error": ValueError("boom"),
    "fail_exception": AirflowFailException("no retry"),
    "airflow_exception": AirflowException("x"),
    "system_exit": SystemExit(3),
    "terminated": AirflowTaskTerminated("SIGTERM"),
    "keyboard": KeyboardInterrupt(),
}
out = {name: str(classify_task_exception(e)) for name, e in errors.items()}
out["none"] = str(classify_task_exception(None))
out["reason_value_error"] = describe_exception(ValueError("boom"))
out["reason_empty"] = describe_exception(RuntimeError())
out["reason_long"] = len(describe_exception(ValueError("x" * 5000)))
out["exit_sigkill"] = describe_process_exit(-signal.SIGKILL)
out["exit_sigsegv"] = describe_process_exit(-signal.SIGSEGV)
out["exit_code"] = describe_process_exit(3)
outcome = TaskProcessOutcome(exit_code=-9, final_state="up_for_retry")
out["outcome"] = [outcome.exit_code, outcome.final_state, supervise_task.__annotations__["return"]]
out["task_exit_failed"] = list(failure_from_task_exit(-9, "failed"))
out["task_exit_server_terminated"] = failure_from_task_exit(-15, "SERVER_TERMINATED")
out["task_exit_ok"] = failure_from_task_exit(0, "success")
out["task_exit_no_state"] = failure_from_task_exit(-9, None)
out["worker_death"] = list(worker_death_failure(123, -9, task_process_dies_with_supervisor=True))
out["worker_death_no_guarantee"] = list(
    worker_death_failure(123, -9, task_process_dies_with_supervisor=False)
)
out["worker_death_default"] = list(worker_death_failure(123, -9))
out["dies_with_supervisor"] = task_process_dies_with_supervisor()
out["from_task_process"] = {
    c: str(cause_from_task_process(c)) for c in ("infra", "application", "timeout", "unknown", None)
}
print(json.dumps(out, default=str))
"""


def test_classification_rules(tmp_path):
    out = run_isolated_script(SCRIPT, tmp_path)

    assert out["timeout"] == "timeout"
    assert out["sensor_timeout"] == "timeout"
    for name in ("value_error", "fail_exception", "airflow_exception", "system_exit"):
        assert out[name] == "application", name
    assert out["terminated"] == "unknown"
    assert out["keyboard"] == "unknown"
    assert out["none"] == "unknown"

    assert out["reason_value_error"] == "ValueError: boom"
    assert out["reason_empty"] == "RuntimeError"
    assert out["reason_long"] == 1000

    # No guess: whether the OOM killer sent it is the memory cgroup counter's to say (oom_evidence).
    assert out["exit_sigkill"] == "Task process was killed by SIGKILL (9) before it reported a state."
    assert "killed by SIGSEGV (11)" in out["exit_sigsegv"] and "OOM" not in out["exit_sigsegv"]
    assert out["exit_code"] == "Task process exited with code 3 before it reported a state."

    # supervise_task() still returns a plain int; the final state comes as a typed outcome.
    assert out["outcome"] == [-9, "up_for_retry", "int"]
    assert out["task_exit_failed"][0] == "unknown" and "killed by SIGKILL" in out["task_exit_failed"][1]
    # A task the server told to stop, a success, and an exit code without a final state are not failures.
    assert out["task_exit_server_terminated"] is None
    assert out["task_exit_ok"] is None
    assert out["task_exit_no_state"] is None
    # A lost worker is infra only where its task process provably died with it (Linux here).
    assert out["dies_with_supervisor"] is True
    assert out["worker_death"][0] == "infra"
    assert out["worker_death"][1].startswith("LocalExecutor worker process 123 died (killed by SIGKILL)")
    # The reason is true to the cause: no OOM hint on an infra failure (issue 9, part 5).
    assert "OOM" not in out["worker_death"][1]
    assert "died with it" in out["worker_death"][1]
    assert out["worker_death_default"] == out["worker_death"]
    # Without the guarantee the task process may still run: never infra, and the reason says why.
    cause, reason = out["worker_death_no_guarantee"]
    assert cause == "unknown"
    assert "cannot guarantee" in reason and "OOM" not in reason

    # The supervisor forwards only what the task runner may report: infra becomes unknown.
    assert out["from_task_process"] == {
        "infra": "unknown",
        "application": "application",
        "timeout": "timeout",
        "unknown": "unknown",
        "null": "None",  # json.dumps writes the key None as "null"
    }
