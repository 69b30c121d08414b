"""Dags for the AIP-97 worker-side failure classification tests (tests/aip97_worker)."""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

OUT = os.environ.get("AIP97W_OUT", "/tmp")


def _record_callback(context):
    """Write what a failure or retry callback saw in its context to $AIP97W_OUT/callbacks.jsonl."""
    ti = context["ti"]
    with open(os.path.join(OUT, "callbacks.jsonl"), "a") as f:
        f.write(
            json.dumps(
                {
                    "dag_id": ti.dag_id,
                    "task_id": ti.task_id,
                    "try_number": ti.try_number,
                    "has_key": "failure_cause" in context,
                    "failure_cause": str(context.get("failure_cause")),
                }
            )
            + "\n"
        )


with DAG(
    "aip97w_causes",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    default_args={"on_failure_callback": _record_callback, "on_retry_callback": _record_callback},
):

    @task(retries=0)
    def raises():
        raise ValueError("boom from task code")

    @task(retries=0)
    def raises_memory_error():
        # A MemoryError the task raises is the task's own exception: application, never oom.
        raise MemoryError("cannot allocate the lookup table")

    @task(retries=0, execution_timeout=timedelta(seconds=2))
    def times_out():
        time.sleep(60)

    @task(retries=1, retry_delay=timedelta(hours=1))
    def task_process_killed_retry():
        os.kill(os.getpid(), signal.SIGKILL)

    @task(retries=0)
    def task_process_killed():
        os.kill(os.getpid(), signal.SIGKILL)

    @task(retries=0)
    def supervisor_killed():
        # The parent of the task process is its supervisor: with the LocalExecutor, the worker.
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(2)

    raises()
    raises_memory_error()
    times_out()
    task_process_killed_retry()
    task_process_killed()
    supervisor_killed()


with DAG("aip97w_api", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task
    def api_a():
        return 1

    @task
    def api_b():
        return 2

    @task
    def api_c():
        return 3

    @task
    def api_d():
        return 4

    api_a()
    api_b()
    api_c()
    api_d()
