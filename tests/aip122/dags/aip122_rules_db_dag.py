"""Dag whose task instances the retry-rules database-level tests fail by hand (never run by a scheduler).

Each task with a rule has a twin without one (``no_rule``: the same ``retries`` and ``retry_delay``), so
a test can show what the rule changes against what the task's ordinary logic does.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, BaseOperator
from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction, RetryRule


class Noop(BaseOperator):
    def execute(self, context):
        return None


UNKNOWN_RETRY = ExceptionRetryPolicy(
    rules=[RetryRule(cause="unknown", action=RetryAction.RETRY, retry_delay=timedelta(minutes=2))]
)
INFRA_RETRY = ExceptionRetryPolicy(
    rules=[RetryRule(cause="infra", action=RetryAction.RETRY, retry_delay=timedelta(seconds=42))]
)

with DAG("aip122_rules_db", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    Noop(task_id="no_rule", retries=1, retry_delay=timedelta(seconds=7))
    Noop(task_id="unknown_rule", retries=1, retry_delay=timedelta(seconds=7), retry_policy=UNKNOWN_RETRY)
    Noop(task_id="infra_rule", retries=1, retry_delay=timedelta(seconds=7), retry_policy=INFRA_RETRY)
    # Three infrastructure retries, base 5 s, doubling, capped at 12 s: at once, then jittered from 10 and from 12.
    Noop(
        task_id="backoff",
        retries=0,
        max_infra_retries=3,
        infra_retry_delay=timedelta(seconds=5),
        max_infra_retry_delay=timedelta(seconds=12),
    )
