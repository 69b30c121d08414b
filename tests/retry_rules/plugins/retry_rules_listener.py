"""Listener plugin appending every on_task_instance_failed call to $RR_OUT/listener.jsonl."""

from __future__ import annotations

import json
import os

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin


class RetryRulesListener:
    @hookimpl
    def on_task_instance_failed(self, previous_state, task_instance, error, failure_cause, retry_rule):
        out = os.environ.get("RR_OUT")
        if not out:
            return
        record = {
            "pid": os.getpid(),
            "dag_id": task_instance.dag_id,
            "task_id": task_instance.task_id,
            "try_number": task_instance.try_number,
            "state": str(getattr(task_instance.state, "value", task_instance.state)),
            "failure_cause": None if failure_cause is None else str(getattr(failure_cause, "value", failure_cause)),
            "retry_rule": retry_rule,
        }
        with open(os.path.join(out, "listener.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")


class RetryRulesListenerPlugin(AirflowPlugin):
    name = "retry_rules_listener"
    listeners = [RetryRulesListener()]
