"""
Dags for tests/aip122/test_worker_guarantees_e2e.py: the guarantees that make infra retries safe.

* ``aip122_no_second_copy``: try 1 SIGKILLs its supervisor (the LocalExecutor worker: the local
  stand-in for a lost node) and then keeps running task code for 30 s, appending a timestamp to
  ``$AIP122G_OUT/copy.jsonl`` every 50 ms. Try 2 records when it started. No try-1 write may come
  after try 2 started.
* ``aip122_spoof``: the task process forges ``TaskState(failed, failure_cause="infra")`` over the
  supervisor channel and exits: it must not be recorded as infra nor earn an infra retry.
* ``aip122_killed_callbacks``: a ``retries=1`` task whose task process is SIGKILLed (as by the OOM
  killer) on every try; its retry and failure callbacks (and e-mails) must each run once, in the Dag
  processor.
* ``aip122_route_probe``: plain tasks whose task instances the route probe reuses.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, task

OUT = os.environ.get("AIP122G_OUT", "/tmp")


def _append(name: str, record: dict) -> None:
    with open(os.path.join(OUT, name), "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()


with DAG("aip122_no_second_copy", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=0)
    def lose_supervisor_keep_running(ti=None):
        if ti.try_number == 1:
            _append("copy.jsonl", {"try": 1, "pid": os.getpid(), "t": time.time(), "before_kill": True})
            os.kill(os.getppid(), signal.SIGKILL)
            deadline = time.time() + 30
            while time.time() < deadline:
                _append("copy.jsonl", {"try": 1, "pid": os.getpid(), "t": time.time()})
                time.sleep(0.05)
            return "try 1 ran to the end"
        _append("copy.jsonl", {"try": ti.try_number, "pid": os.getpid(), "t": time.time(), "start": True})
        return "second try ran"

    lose_supervisor_keep_running()


with DAG("aip122_spoof", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=0)
    def forge_infra(ti=None):
        if ti.try_number == 1:
            from airflow.sdk.execution_time.comms import TaskState
            from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

            SUPERVISOR_COMMS.send(
                TaskState(
                    state="failed",
                    end_date=datetime.now(tz=timezone.utc),
                    failure_cause="infra",
                    failure_reason="forged by task code",
                )
            )
            os._exit(1)
        return "second try ran"

    forge_infra()


def _record(kind):
    def callback(context):
        ti = context["ti"]
        exception = context.get("exception")
        _append(
            "killed_callbacks.jsonl",
            {
                "kind": kind,
                "pid": os.getpid(),
                "task_id": ti.task_id,
                "try_number": ti.try_number,
                "failure_cause": None
                if context.get("failure_cause") is None
                else str(context["failure_cause"]),
                "reason": None if exception is None else str(exception),
            },
        )

    return callback


with DAG("aip122_killed_callbacks", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(
        retries=1,
        retry_delay=timedelta(seconds=1),
        on_retry_callback=_record("retry"),
        on_failure_callback=_record("failure"),
        email=["ops@example.invalid"],
        email_on_retry=True,
        email_on_failure=True,
    )
    def oom_killed():
        os.kill(os.getpid(), signal.SIGKILL)

    oom_killed()


with DAG("aip122_route_probe", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=0)
    def probe_failed():
        return 1

    @task(retries=0)
    def probe_retry():
        return 2

    probe_failed()
    probe_retry()
