"""
The Execution API side of AIP-97 against the real app and database: the Cadwyn version
2026-11-30 adds failure_cause/failure_reason to the failed and retry payloads; older clients keep
working without them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import lines
import pytest
from harness import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

PROBE = Path(__file__).with_name("_execution_api_probe.py")


@pytest.fixture(scope="module")
def probe(stack):
    stack.trigger("aip97w_api")
    for task_id in ("api_a", "api_b", "api_c", "api_d"):
        stack.wait_ti("aip97w_api", task_id, {"success"}, timeout=120)
        # The probe puts the TIs back to running: the scheduler must have consumed the executor's
        # event for each of them first, or it would see a running TI and fail it (state mismatch).
        wait_for(
            lambda t=task_id: (
                f"TaskInstance Finished: dag_id=aip97w_api, task_id={t}," in stack.env.log_text("scheduler")
            ),
            timeout=60,
            what=f"the scheduler to process the executor event of {task_id}",
        )
    result = subprocess.run(
        [stack.env.python, str(PROBE)],
        env={**stack.env.env, "AIP97_PAST_TRIES": lines.PAST_TRIES, "AIP97_LINE": lines.LINE},
        cwd=stack.env.home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_old_client_without_cause_still_fails_the_task(probe):
    assert probe["old_failed"]["status"] == 204, probe["old_failed"]
    ti = probe["old_failed_ti"]
    assert ti["state"] == "failed"
    # No evidence of the cause: recorded as unknown.
    assert ti["failure_cause"] == "unknown"
    assert ti["failure_reason"] is None
    assert probe["old_retry"]["status"] == 204, probe["old_retry"]
    assert probe["old_retry_ti"]["state"] == "up_for_retry"
    assert probe["old_retry_ti"]["failure_cause"] == "unknown"


def test_invalid_cause_is_rejected_with_the_allowed_values(probe):
    resp = probe["new_invalid_cause"]
    assert resp["status"] == 422
    for value in ("infra", "timeout", "application", "unknown", "oom"):
        assert value in resp["body"]


def test_cause_only_with_failed_state(probe):
    resp = probe["new_cause_on_skipped"]
    assert resp["status"] == 422
    assert "only be sent with state 'failed'" in resp["body"]


def test_failed_with_cause_is_stored_and_reason_truncated(probe):
    assert probe["new_failed"]["status"] == 204, probe["new_failed"]
    ti = probe["new_failed_ti"]
    assert ti["state"] == "failed"
    # Trust boundary: a worker never has evidence of infra; the route records it as unknown.
    # (tests/aip122/test_worker_guarantees_e2e.py checks that it earns no infra retry.)
    assert ti["failure_cause"] == "unknown"
    assert len(ti["failure_reason"]) == 1000
    assert ti["failure_reason"].endswith("…")


def test_retry_keeps_cause_on_live_row_and_history_and_new_try_clears_it(probe):
    assert probe["new_retry"]["status"] == 204, probe["new_retry"]
    assert probe["new_retry_ti"]["state"] == "up_for_retry"
    assert probe["new_retry_ti"]["failure_cause"] == "application"
    assert probe["new_retry_tih"] == {"failure_cause": "application", "failure_reason": "E: r"}
    assert probe["run"]["status"] == 200
    assert probe["run_ti"]["state"] == "running"
    assert probe["run_ti"]["failure_cause"] is None
    assert probe["run_ti"]["failure_reason"] is None
