"""A listener plugin that records every on_task_instance_failed call as a JSON line."""

from __future__ import annotations

import json
import os

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin


class FailureRecorder:
    @hookimpl
    def on_task_instance_failed(self, previous_state, task_instance, error, failure_cause):
        path = os.path.join(os.environ.get("AIP97W_OUT", "/tmp"), "listener.jsonl")
        with open(path, "a") as f:
            f.write(
                json.dumps(
                    {
                        "dag_id": task_instance.dag_id,
                        "task_id": task_instance.task_id,
                        "try_number": task_instance.try_number,
                        "failure_cause": None if failure_cause is None else str(failure_cause),
                        "error": None if error is None else str(error)[:200],
                        "pid": os.getpid(),
                    }
                )
                + "\n"
            )


class Aip97WorkerListenerPlugin(AirflowPlugin):
    name = "aip97w_listener"
    listeners = [FailureRecorder()]
