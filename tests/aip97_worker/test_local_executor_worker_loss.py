"""
LocalExecutor bookkeeping for a worker that dies while holding a workload (AIP-97), with real worker
processes: the held task instance is failed at once with the cause ``infra``, and a result that
raced the worker's death is not reported a second time.
"""

from __future__ import annotations

import pytest
from harness import run_isolated_script

pytestmark = pytest.mark.timeout(120)

SCRIPT = r"""
import json, os, signal, time
from airflow.executors.failure_info import ExecutorFailureInfo
from airflow.executors.local_executor import LocalExecutor
from airflow.executors.local_worker_reports import WorkloadClaim
from airflow.models.taskinstancekey import TaskInstanceKey

ex = LocalExecutor(parallelism=1)
ex.start()
if not ex.workers:  # spawn start method: workers are started on demand
    ex._spawn_worker()
(pid, proc), = ex.workers.items()
try:
    key = TaskInstanceKey("d", "t", "r", 1, -1)
    ex.running.add(key)
    # What the worker announces before it runs a workload.
    ex.result_queue.put((key, None, WorkloadClaim(pid)))
    ex.sync()
    held = dict(ex._held_workloads)
    os.kill(pid, signal.SIGKILL)
    proc.join(10)
    ex.sync()
    events = ex.get_event_buffer()
    state, info = events[key]
    # A result for the same try that raced the worker's death must not be reported again.
    ex.result_queue.put((key, "success", None))
    ex.sync()
    late = ex.get_event_buffer()
    print(json.dumps({
        "held": {str(k): str(v) for k, v in held.items()} , "pid": pid,
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
    out = run_isolated_script(SCRIPT, tmp_path)
    assert list(out["held"].values()) == [
        "TaskInstanceKey(dag_id='d', task_id='t', run_id='r', try_number=1, map_index=-1)"
    ]
    assert out["state"] == "failed"
    assert out["wrapped"] and out["cause"] == "infra"
    assert f"worker process {out['pid']} died (killed by SIGKILL)" in out["reason"]
    assert out["running"] is False
    assert out["late"] == {}
