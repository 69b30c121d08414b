"""
Dags for the AIP-122 end-to-end tests: tasks that lose their LocalExecutor worker.

A task "loses its worker" by SIGKILLing its parent -- the supervisor, which with the LocalExecutor
is the worker process -- and then itself, as when the node under it goes away. The LocalExecutor
sees the dead worker and fails the task instance with the cause ``infra``.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

OUT = os.environ.get("AIP122_OUT", "/tmp")


def lose_worker() -> None:
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _record(kind):
    def callback(context):
        ti = context["ti"]
        with open(os.path.join(OUT, "callbacks.jsonl"), "a") as f:
            record = {
                "kind": kind,
                "task_id": ti.task_id,
                "map_index": ti.map_index,
                "try_number": ti.try_number,
                "failure_cause": None
                if context.get("failure_cause") is None
                else str(context["failure_cause"]),
            }
            f.write(json.dumps(record) + "\n")

    return callback


CALLBACKS = {"on_retry_callback": _record("retry"), "on_failure_callback": _record("failure")}


with DAG("aip122_default", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=0)
    def kill_once(ti=None):
        if ti.try_number == 1:
            lose_worker()
        return "done"

    kill_once()


with DAG("aip122_ha", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, default_args=CALLBACKS):

    @task(retries=0)
    def kill_once(ti=None):
        if ti.try_number == 1:
            lose_worker()
        return "done"

    @task(retries=0, max_infra_retries=2)
    def kill_always():
        lose_worker()

    @task(retries=0, max_infra_retries=0)
    def opt_out(ti=None):
        if ti.try_number == 1:
            lose_worker()
        return "done"

    @task(retries=1, retry_delay=timedelta(seconds=1))
    def app_fail():
        raise RuntimeError("application error")

    @task(retries=0, max_infra_retries=3)
    def kill_twice(item, ti=None):
        if ti.try_number <= 2:
            lose_worker()
        return item

    kill_once()
    kill_always()
    opt_out()
    app_fail()
    kill_twice.expand(item=[0, 1, 2, 3])
