"""
Dags a patched stack runs to fill a database with every kind of state the patch set adds.

- ``ops_infra``: try 1 loses its LocalExecutor worker (SIGKILL of the supervisor, then itself): cause
  ``infra``, granted an infrastructure retry (``infra_retry_count`` 1, a history row); try 2 succeeds.
- ``ops_cap``: ``lose_always`` loses its worker on every try with ``max_infra_retries=1``: try 1 is
  granted, try 2 is denied (``cap_reached``) and fails; ``opt_out`` loses it once with
  ``max_infra_retries=0``: denied (``task_opt_out``).
- ``ops_app``: two tries that fail in the task's code (``application``; try 1 in the history).
- ``ops_timeout``: a try that exceeds its ``execution_timeout`` (``timeout``).
- ``ops_emit``: asset events emitted with idempotency keys.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, task

TARGET = Asset("ops_target")


def _lose_worker() -> None:
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


with DAG("ops_infra", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=0, max_infra_retries=1)
    def lose_worker_once(ti=None):
        if ti.try_number == 1:
            _lose_worker()
        return "done"

    lose_worker_once()


with DAG("ops_cap", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=0, max_infra_retries=1)
    def lose_always():
        _lose_worker()

    @task(retries=0, max_infra_retries=0)
    def opt_out():
        _lose_worker()

    lose_always()
    opt_out()


with DAG("ops_app", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=1, retry_delay=timedelta(seconds=0))
    def always_fails():
        raise RuntimeError("the task's own bug")

    always_fails()


with DAG("ops_timeout", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=0, execution_timeout=timedelta(seconds=1))
    def too_slow():
        time.sleep(60)

    too_slow()


with DAG("ops_emit", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(outlets=[TARGET])
    def emit(run_id=None):
        for n in (1, 2):
            TARGET.emit(idempotency_key=f"{run_id}-{n}", extra={"n": n})
        return "emitted"

    emit()
