"""
The issue's example rules, one task each, with real task processes (tests/retry_rules/test_rules_e2e.py).

* ``timeout_fails``: ``RetryRule(cause="timeout", action=FAIL)``; the task times out with retries
  left. Decided in the worker: the task runner's cause (``timeout``) is the rule's input.
* ``unknown_waits``: ``RetryRule(cause="unknown", action=RETRY, retry_delay=2 min)``; the task
  process is SIGKILLed (no exception). The supervisor reports it, and the Execution API evaluates the
  serialized rule.
* ``heartbeat_waits``: the same rule; the task stops its supervisor (SIGSTOP), so the scheduler ends
  the try on the heartbeat timeout and evaluates the rule.
* ``infra_fails``: ``RetryRule(cause="infra", action=FAIL)``, a task that is not safe to run again;
  it loses its LocalExecutor worker while infrastructure retries are on (``max_infra_retries=1``).
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta

from airflow.sdk import DAG, task
from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction, RetryRule

TIMEOUT_FAILS = ExceptionRetryPolicy(rules=[RetryRule(cause="timeout", action=RetryAction.FAIL)])
UNKNOWN_WAITS = ExceptionRetryPolicy(
    rules=[
        RetryRule(exception=ValueError, action=RetryAction.FAIL),
        RetryRule(cause="unknown", action=RetryAction.RETRY, retry_delay=timedelta(minutes=2)),
    ]
)
INFRA_FAILS = ExceptionRetryPolicy(
    rules=[RetryRule(cause="infra", action=RetryAction.FAIL, reason="not safe to run again")]
)

with DAG("retry_rules_e2e", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, max_active_tasks=8):

    @task(retries=2, retry_delay=timedelta(seconds=1), execution_timeout=timedelta(seconds=3), retry_policy=TIMEOUT_FAILS)
    def timeout_fails():
        time.sleep(60)

    @task(retries=1, retry_delay=timedelta(seconds=1), retry_policy=UNKNOWN_WAITS)
    def unknown_waits():
        os.kill(os.getpid(), signal.SIGKILL)

    @task(retries=1, retry_delay=timedelta(seconds=1), retry_policy=UNKNOWN_WAITS)
    def heartbeat_waits():
        os.kill(os.getppid(), signal.SIGSTOP)
        time.sleep(120)

    @task(retries=2, retry_delay=timedelta(seconds=1), retry_policy=INFRA_FAILS)
    def infra_fails():
        # Lose the worker: the LocalExecutor's worker is this task's supervisor.
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    timeout_fails()
    unknown_waits()
    heartbeat_waits()
    infra_fails()
