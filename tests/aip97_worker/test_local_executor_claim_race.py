"""LocalExecutor: a worker that announces its workload and dies before the executor reads the
announcement must still have that workload failed at once (no wait for the heartbeat timeout).

Real LocalExecutor, real worker-like process (forked, writes to the executor's real result queue,
then SIGKILLs itself), no scheduler needed: the executor's own reaping is what is under test.

The announcement is the line's: 3.3's patch adds a ``WorkloadClaim`` message; 3.4's LocalExecutor
already has one (``(pid, key, running_state, None)``, ``None`` for a task workload, keyed by
``TaskInstanceUuid``) and only reads it for a key it is running.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import uuid

import lines

# 3.4's announcement is what its _run_worker sends; 3.3's is the patch's WorkloadClaim.
ANNOUNCES_WITH_PID_FIRST = lines.LINE != lines.DEFAULT_LINE


def _claim_then_die(result_queue, key) -> None:
    if ANNOUNCES_WITH_PID_FIRST:
        result_queue.put((os.getpid(), key, None, None))
    else:
        from airflow.executors.local_worker_reports import WorkloadClaim

        result_queue.put((key, None, WorkloadClaim(os.getpid())))
    os.kill(os.getpid(), signal.SIGKILL)


def test_claim_read_after_the_worker_died_still_fails_the_workload(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    from airflow.executors.failure_info import failure_details_from_event
    from airflow.executors.local_executor import LocalExecutor
    from airflow.utils.state import TaskInstanceState

    executor = LocalExecutor(parallelism=1)
    executor.start()
    try:
        if ANNOUNCES_WITH_PID_FIRST:
            from airflow.executors.workloads.types import TaskInstanceUuid

            key = TaskInstanceUuid(uuid.uuid4())
            # 3.4 reads an announcement only for a workload it dispatched (in ``running``), as
            # _process_workloads() leaves it.
            executor.running.add(key)
        else:
            from airflow.models.taskinstancekey import TaskInstanceKey

            key = TaskInstanceKey("dag", "task", "run", try_number=1, map_index=-1)
        worker = multiprocessing.get_context("fork").Process(
            target=_claim_then_die, args=(executor.result_queue, key)
        )
        worker.start()
        worker.join(timeout=30)
        assert worker.exitcode == -signal.SIGKILL
        pid = worker.pid
        # The executor has not read the claim yet: it learns of the death and the claim together.
        executor.workers[pid] = worker
        executor._check_workers()

        state, info = executor.event_buffer[key]
        details = failure_details_from_event(state, info)
        assert state == TaskInstanceState.FAILED
        assert details is not None and details.failure_cause.value == "infra"
        assert f"worker process {pid} died (killed by SIGKILL)" in details.failure_reason
        assert pid not in executor.workers
    finally:
        executor.end()  # also stops the worker processes start() spawned
