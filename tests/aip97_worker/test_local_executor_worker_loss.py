"""
LocalExecutor bookkeeping for a worker that dies while holding a workload (AIP-97), with real worker
processes: the held task instance is failed at once with the cause ``infra``, and a result that
raced the worker's death is not reported a second time.

3.3's LocalExecutor does not know which workload a worker holds: the patch adds a ``WorkloadClaim``
message and the executor's ``_held_workloads``. 3.4's LocalExecutor already has both halves (a worker
sends ``(pid, key, running_state, None)`` before it runs a workload, the executor keeps
``_worker_tasks`` pid -> key, keyed by ``TaskInstanceUuid``) and already fails a dead worker's
workload; its port adds only the cause. So the scenario is the same on both lines, and only the
worker's announcement and the executor's record of it differ (see ``_LINE_SPECIFIC``).
"""

from __future__ import annotations

import lines
import pytest
from harness import run_isolated_script

pytestmark = pytest.mark.timeout(120)

_LINE_SPECIFIC = {
    # 3.3: the key is the try's coordinates; the worker claims it with the patch's WorkloadClaim.
    "3.3": r"""
from airflow.executors.local_worker_reports import WorkloadClaim
from airflow.models.taskinstancekey import TaskInstanceKey
key = TaskInstanceKey("d", "t", "r", 1, -1)
def announce(pid):
    ex.result_queue.put((key, None, WorkloadClaim(pid)))
def held():
    return [str(k) for k in ex._held_workloads.values()]
def late_success(pid):
    ex.result_queue.put((key, "success", None))
""",
    # 3.4: the key is the attempt's UUID; a task workload's running_state is None, so the worker's
    # announcement is (pid, key, None, None), exactly what 3.4's _run_worker sends.
    "3.4": r"""
import uuid
from airflow.executors.workloads.types import TaskInstanceUuid
key = TaskInstanceUuid(uuid.uuid4())
def announce(pid):
    ex.result_queue.put((pid, key, None, None))
def held():
    return [str(k) for k in ex._worker_tasks.values()]
def late_success(pid):
    ex.result_queue.put((pid, key, "success", None))
""",
}

SCRIPT = r"""
import json, os, signal, time
from airflow.executors.failure_info import ExecutorFailureInfo
from airflow.executors.local_executor import LocalExecutor

ex = LocalExecutor(parallelism=1)
ex.start()
if not ex.workers:  # spawn start method: workers are started on demand
    ex._spawn_worker()
(pid, proc), = ex.workers.items()
LINE_SPECIFIC
try:
    ex.running.add(key)
    # What the worker announces before it runs a workload.
    announce(pid)
    ex.sync()
    held_before_death = held()
    os.kill(pid, signal.SIGKILL)
    proc.join(10)
    ex.sync()
    events = ex.get_event_buffer()
    state, info = events[key]
    # A result for the same try that raced the worker's death must not be reported again.
    late_success(pid)
    ex.sync()
    late = ex.get_event_buffer()
    print(json.dumps({
        "key": str(key), "held": held_before_death, "pid": pid,
        "state": str(state), "wrapped": isinstance(info, ExecutorFailureInfo),
        "cause": str(info.failure_cause), "reason": info.failure_reason,
        "running": key in ex.running, "late": {str(k): str(v) for k, v in late.items()},
    }))
finally:
    for p in list(ex.workers.values()):
        if p.is_alive():
            p.kill()
"""


def test_dead_worker_fails_its_workload_once(tmp_path):
    out = run_isolated_script(SCRIPT.replace("LINE_SPECIFIC", _LINE_SPECIFIC[lines.LINE]), tmp_path)
    assert out["held"] == [out["key"]]
    if lines.LINE == lines.DEFAULT_LINE:
        assert out["key"] == "TaskInstanceKey(dag_id='d', task_id='t', run_id='r', try_number=1, map_index=-1)"
    assert out["state"] == "failed"
    assert out["wrapped"] and out["cause"] == "infra"
    assert f"worker process {out['pid']} died (killed by SIGKILL)" in out["reason"]
    assert out["running"] is False
    assert out["late"] == {}
