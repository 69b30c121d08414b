"""A task whose first try kills the Celery pool child that supervises it (AIP-97 provider e2e test)."""

from __future__ import annotations

import datetime
import os
import signal

from airflow.sdk import DAG, task

with DAG(
    "aip97_celery_lost_worker",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
):

    @task(retries=0)
    def lose_worker(**context):
        if context["ti"].try_number == 1:
            # The task runs in a child of its supervisor, which is the Celery pool child: SIGKILL it,
            # as the kernel OOM killer would, then go away without reporting anything.
            os.kill(os.getppid(), signal.SIGKILL)
            os._exit(137)
        return "second try ran"

    lose_worker()
