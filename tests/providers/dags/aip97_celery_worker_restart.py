"""A long task for the Celery worker-restart tests (issue 14, tests/providers/test_celery_worker_restart_e2e.py;
the container tests, tests/image/test_deployment_e2e.py).

Try 1 records its start, then appends a timestamp to ``$AIP97CEL_OUT/<run_id>.jsonl`` every 50 ms
until ``$AIP97CEL_OUT/<run_id>.release`` exists (or 100 s pass), and returns: the test kills the
whole worker under it, restarts it, or drops its broker connection meanwhile. A later try records its
start and returns at once.

``$AIP97CEL_QUEUES`` (comma separated, default ``default``) names the Celery queues to hold a task on:
one Dag per queue, ``aip97_celery_worker_restart`` for ``default`` and
``aip97_celery_worker_restart_<queue>`` for the others, so that a test can hold a try on each of
several workers.
"""

from __future__ import annotations

import datetime
import json
import os
import time

from airflow.sdk import DAG, task

OUT = os.environ.get("AIP97CEL_OUT", "/tmp")
QUEUES = [q for q in os.environ.get("AIP97CEL_QUEUES", "default").split(",") if q]


def hold_on(queue: str):
    """The held task, on ``queue``."""

    @task(retries=0, queue=queue)
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

    return hold


for queue in QUEUES:
    with DAG(
        "aip97_celery_worker_restart" + ("" if queue == "default" else f"_{queue}"),
        schedule=None,
        start_date=datetime.datetime(2026, 1, 1),
        catchup=False,
    ):
        hold_on(queue)()
