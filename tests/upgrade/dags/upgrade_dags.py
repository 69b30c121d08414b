"""Dags run by the patched 3.3.2 stack to fill a database with what the patch set adds, before upgrading it."""

from __future__ import annotations

import os
import signal
from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, task

TARGET = Asset("upgrade_target")


with DAG("upgrade_infra", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    # Try 1 loses its LocalExecutor worker (SIGKILL of the supervisor, then itself): cause infra, and
    # with max_infra_retries=1 an infrastructure retry (infra_retry_count 1); try 2 succeeds.
    @task(retries=0, max_infra_retries=1)
    def lose_worker_once(ti=None):
        if ti.try_number == 1:
            os.kill(os.getppid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        return "done"

    lose_worker_once()


with DAG("upgrade_app", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    # Two tries that fail in the task's code: cause application, try 1 in the history.
    @task(retries=1, retry_delay=timedelta(seconds=0))
    def always_fails():
        raise RuntimeError("the task's own bug")

    always_fails()


with DAG("upgrade_emit", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    # Asset events emitted with idempotency keys (rows in asset_event_idempotency_key).
    @task(outlets=[TARGET])
    def emit(run_id=None):
        for n in (1, 2):
            TARGET.emit(idempotency_key=f"{run_id}-{n}", extra={"n": n})
        return "emitted"

    emit()
