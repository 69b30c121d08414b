"""A rule with an unknown cause: the Dag processor must reject the file, naming the task and the rule."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task
from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction, RetryRule

with DAG("retry_rules_invalid", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retry_policy=ExceptionRetryPolicy(rules=[RetryRule(cause="preempted", action=RetryAction.FAIL)]))
    def bad_cause():
        pass

    bad_cause()
