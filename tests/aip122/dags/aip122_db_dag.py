"""Dag whose task instances the AIP-122 database-level tests fail by hand (never run by a scheduler)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, BaseOperator
from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction, RetryRule


class Noop(BaseOperator):
    def execute(self, context):
        return None


def _callback(context):
    """Never run here: its presence makes the scheduler write callback requests for the task."""


with DAG("aip122_db", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    Noop(task_id="r0", retries=0)
    Noop(task_id="r2", retries=2)
    Noop(task_id="opt_out", retries=0, max_infra_retries=0)
    Noop(task_id="opt_in_2", retries=0, max_infra_retries=2)
    Noop(task_id="impersonated", retries=0, max_infra_retries=2, run_as_user="nobody")
    Noop(task_id="cb_r0", retries=0, on_retry_callback=_callback, on_failure_callback=_callback)
    # Two deciders race on one failure of this task (test_atomic_grants.py): the scheduler's infra
    # failure is failed by rule 0, a worker's dead task process (cause unknown) retried by rule 1.
    Noop(
        task_id="rule_fail",
        retries=2,
        retry_policy=ExceptionRetryPolicy(
            rules=[
                RetryRule(cause="infra", action=RetryAction.FAIL),
                RetryRule(cause="unknown", action=RetryAction.RETRY, retry_delay=timedelta(minutes=2)),
            ]
        ),
    )
    Noop.partial(task_id="mapped", retries=0, max_infra_retries=1).expand(doc=["a", "b"])
