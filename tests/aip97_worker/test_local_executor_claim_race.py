"""LocalExecutor: a worker that announces its workload and dies before the executor reads the
announcement must still have that workload failed at once (no wait for the heartbeat timeout).

Real LocalExecutor, real worker-like process (forked, writes to the executor's real result queue,
then SIGKILLs itself), no scheduler needed: the executor's own reaping is what is under test.
"""

from __future__ import annotations

import multiprocessing
import os
import signal


def _claim_then_die(result_queue, key) -> None:
    from airflow.executors.local_worker_reports import WorkloadClaim

    result_queue.put((key, None, WorkloadClaim(os.getpid())))
    os.kill(os.getpid(), signal.SIGKILL)


def test_claim_read_after_the_worker_died_still_fails_the_workload(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    from airflow.executors.failure_info import failure_details_from_event
    from airflow.executors.local_executor import LocalExecutor
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.utils.state import TaskInstanceState

    executor = LocalExecutor(parallelism=1)
    executor.start()
    try:
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
