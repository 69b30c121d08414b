"""A Dag whose tasks fail with each AIP-97 cause, for the UI browser test (tests/ui)."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta

from airflow.sdk import DAG, task


def lose_worker() -> None:
    """SIGKILL the supervisor (with the LocalExecutor: the worker), then this task process."""
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


with DAG("ui_failure_causes", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=0)
    def infra_then_application(ti=None):
        # Try 1 loses its worker: an infra failure, retried by AIP-122 ([core] max_infra_retries=1).
        # Try 2 fails in the task's own code.
        if ti.try_number == 1:
            lose_worker()
        raise ValueError("boom on the second try: the input file has no header row")

    @task(retries=0, execution_timeout=timedelta(seconds=2))
    def times_out():
        time.sleep(60)

    @task(retries=0)
    def task_process_killed():
        os.kill(os.getpid(), signal.SIGKILL)

    infra_then_application()
    times_out()
    task_process_killed()
