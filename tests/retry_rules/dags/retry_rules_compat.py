"""
Dags vanilla Airflow parses, which the patched build must parse too (tests/retry_rules/test_rules_e2e.py).

* ``uses_quota``: made by a task factory whose exception class is defined inside the factory, with a
  rule on that exception (``action=FAIL``) and two retries. Worker-only, as in vanilla Airflow: not
  an import error, and the task fails at its first try, decided in the worker by the rule.
* ``subclass_rule``: a rule on ``cause="infra"`` in a subclass of ``ExceptionRetryPolicy``, which can
  never match (the worker never sees ``infra``, the scheduler does not read a subclass): a
  ``RetryPolicyWarning`` naming the task and the rule, not an error; nothing is serialized for it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task
from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction, RetryRule


def quota_task():
    class QuotaExceeded(Exception):
        pass

    policy = ExceptionRetryPolicy(
        rules=[RetryRule(exception=QuotaExceeded, action=RetryAction.FAIL, reason="quota does not come back")]
    )

    @task(retries=2, retry_delay=timedelta(seconds=1), retry_policy=policy)
    def uses_quota():
        raise QuotaExceeded("over quota")

    return uses_quota()


class MyPolicy(ExceptionRetryPolicy):
    pass


with DAG("retry_rules_compat", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    quota_task()

    @task(retry_policy=MyPolicy(rules=[RetryRule(cause="infra", action=RetryAction.FAIL)]))
    def subclass_rule():
        pass

    subclass_rule()
