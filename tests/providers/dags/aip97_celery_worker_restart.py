"""A long task for the Celery worker-restart tests (issue 14, tests/providers/test_celery_worker_restart_e2e.py).

Try 1 records its start, then appends a timestamp to ``$AIP97CEL_OUT/<run_id>.jsonl`` every 50 ms
until ``$AIP97CEL_OUT/<run_id>.release`` exists (or 100 s pass), and returns: the test kills the
whole worker under it, restarts it, or drops its broker connection meanwhile. A later try records its
start and returns at once.
"""

from __future__ import annotations

import datetime
import json
import os
import time

from airflow.sdk import DAG, task

OUT = os.environ.get("AIP97CEL_OUT", "/tmp")


with DAG(
    "aip97_celery_worker_restart",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
):

    @task(retries=0)
    def hold(**context):
        try_number = context["ti"].try_number
        run_id = context["run_id"]
        path = os.path.join(OUT, f"{run_id.replace(':', '_')}.jsonl")

        def append(record: dict) -> None:
            with open(path, "a") as f:
                f.write(json.dumps({"try": try_number, "pid": os.getpid(), "t": time.time(), **record}) + "\n")

        append({"start": True})
        if try_number > 1:
            return "later try ran"
        release = path.replace(".jsonl", ".release")
        deadline = time.time() + 100
        while time.time() < deadline and not os.path.exists(release):
            append({})
            time.sleep(0.05)
        return "first try released"

    hold()
