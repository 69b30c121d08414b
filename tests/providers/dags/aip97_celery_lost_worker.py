"""A task whose first try kills the Celery pool child that supervises it (AIP-97 provider e2e test).

Try 1 SIGKILLs its supervisor, the Celery pool child, as the kernel OOM killer would, and then keeps
running task code for 30 s, appending a timestamp to ``$AIP97CEL_OUT/copy.jsonl`` every 50 ms: the
stand-in for a task that outlives its lost worker. Try 2 records when its task code started.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import time

from airflow.sdk import DAG, task

OUT = os.environ.get("AIP97CEL_OUT", "/tmp")


def _append(record: dict) -> None:
    with open(os.path.join(OUT, "copy.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")


with DAG(
    "aip97_celery_lost_worker",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
):

    @task(retries=0)
    def lose_worker(**context):
        try_number = context["ti"].try_number
        if try_number == 1:
            # The task runs in a child of its supervisor, which is the Celery pool child.
            _append({"try": 1, "pid": os.getpid(), "t": time.time(), "before_kill": True})
            os.kill(os.getppid(), signal.SIGKILL)
            deadline = time.time() + 30
            while time.time() < deadline:
                _append({"try": 1, "pid": os.getpid(), "t": time.time()})
                time.sleep(0.05)
            os._exit(137)
        _append({"try": try_number, "pid": os.getpid(), "t": time.time(), "start": True})
        return "second try ran"

    lose_worker()
