"""
End to end: a real Celery worker loses the pool child running a task; the scheduler records infra.

On the directory's ``celery_stack`` (conftest.py: a private PostgreSQL database, a private
``redis-server`` as broker and result backend, ``airflow api-server`` and ``airflow dag-processor``)
this module runs its own ``airflow scheduler`` with the CeleryExecutor (heartbeat timeout 300 s: a
failure seen within the test came from the executor) and its own ``airflow celery worker``, each in
its own process group. The task's first try SIGKILLs its supervisor, i.e. the Celery pool child,
and keeps running task code for 30 s; Celery records ``WorkerLostError`` and the executor reports
it. The task process must die with its supervisor, so no try-1 code runs once try 2 has started.

When AIP-122 is installed (``[core] max_infra_retries`` exists in config.yml) the stack runs with
``max_infra_retries = 1`` and the task, which has ``retries=0``, must succeed on its second try.
"""

from __future__ import annotations

import pytest
from _helpers import aip122_installed, core_supports_failure_cause
from harness import FINISHED, Stack, process_gone

pytestmark = pytest.mark.requires_feature("aip-97-celery")

DAG_ID, TASK_ID = "aip97_celery_lost_worker", "lose_worker"
HEARTBEAT_TIMEOUT = 300  # far beyond the test: a failure seen within it came from the executor


@pytest.fixture(scope="module")
def celery_run(celery_stack: Stack):
    """Run the Dag once on the Celery stack; yield the stack once the task instance is done."""
    stack = celery_stack
    stack.start_component(
        "scheduler",
        name="scheduler-lost-child",
        config={"AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT)},
    )
    stack.start_worker("celery-worker")
    try:
        stack.trigger(DAG_ID)
        stack.wait_ti(DAG_ID, TASK_ID, FINISHED, timeout=180)
        # Every write of try 1's task process is in the file once it is gone: at once if it died with
        # its pool child, as it must; after its 30 s of writing otherwise, which the tests then see.
        (try1_pid,) = {r["pid"] for r in stack.jsonl("copy.jsonl") if r["try"] == 1}
        stack.wait_for(lambda: process_gone(try1_pid), timeout=60, interval=0.2, what=f"try 1's process {try1_pid} gone")
        yield stack
    finally:
        stack.stop("celery-worker")
        stack.stop("scheduler-lost-child")


def tries(stack: Stack) -> list[dict]:
    """Every try of the task instance: archived tries first, then the live row."""
    return stack.tries(DAG_ID, columns="try_number, state, failure_cause, failure_reason, start_date")


@pytest.mark.e2e
@pytest.mark.timeout(420)
@pytest.mark.skipif(not core_supports_failure_cause(), reason="needs the AIP-97 core to record causes")
def test_lost_worker_child_is_infra(celery_run):
    stack = celery_run
    first = tries(stack)[0]
    assert first["try_number"] == 1
    assert first["failure_cause"] == "infra", (first, stack.log_text("scheduler-lost-child")[-3000:])
    assert first["failure_reason"].startswith("Celery worker child process lost: Worker exited prematurely")
    assert "signal 9 (SIGKILL)" in first["failure_reason"]
    if not aip122_installed():
        assert [t["state"] for t in tries(stack)] == ["failed"]  # retries=0: the try is final


@pytest.mark.e2e
@pytest.mark.timeout(420)
@pytest.mark.requires_feature("aip-122")
@pytest.mark.skipif(not aip122_installed(), reason="AIP-122 ([core] max_infra_retries) is not installed")
def test_infra_retry_succeeds_on_second_try(celery_run):
    all_tries = tries(celery_run)
    assert [(t["try_number"], t["failure_cause"]) for t in all_tries][:1] == [(1, "infra")]
    assert all_tries[-1]["try_number"] == 2
    assert all_tries[-1]["state"] == "success"


@pytest.mark.e2e
@pytest.mark.timeout(420)
@pytest.mark.requires_feature("aip-122")
@pytest.mark.skipif(not aip122_installed(), reason="AIP-122 ([core] max_infra_retries) is not installed")
def test_lost_pool_child_stops_task_code_before_try_2(celery_run):
    """Issue 9, part 1: by the time try 1 is recorded as infra and retried, its task code has stopped."""
    stack = celery_run
    all_tries = tries(stack)
    assert [t["try_number"] for t in all_tries] == [1, 2]
    records = stack.jsonl("copy.jsonl")
    try1 = [r["t"] for r in records if r["try"] == 1]
    try2_start = [r["t"] for r in records if r["try"] == 2 and r.get("start")]
    assert any(r["try"] == 1 and r.get("before_kill") for r in records), "try 1 never ran its task code"
    assert len(try2_start) == 1, records[-5:]
    live = all_tries[-1]
    last_try1 = max(try1)
    assert last_try1 < live["start_date"].timestamp(), (
        f"try 1 was still running task code {last_try1 - live['start_date'].timestamp():.1f}s "
        "after try 2 started"
    )
    assert last_try1 < try2_start[0]
