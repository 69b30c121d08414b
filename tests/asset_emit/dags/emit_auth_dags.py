"""
Dags for declared publication ([core] asset_emit_authorization = declared), test_emit_authorization.py.

Every producer here declares AUTH_DECLARED (an outlet of one of its tasks) and tries AUTH_TARGET,
which only a consumer schedules on. Each task that declares skips or fails, so that no outlet
event of a success is mixed with the emitted ones.
"""

from __future__ import annotations

import json
import os

from airflow.sdk import DAG, Asset, task
from airflow.sdk.definitions.asset.notifier import AssetEventNotifier
from airflow.sdk.exceptions import AirflowSkipException, AssetEmitError, AssetEmitNotDeclaredError

AUTH_DECLARED = Asset("emit_auth_declared")
AUTH_TARGET = Asset("emit_auth_target")


def _record(name: str, outcome: dict) -> None:
    with open(os.path.join(os.environ["EMIT_TEST_OUT"], f"{name}.json"), "w") as fh:
        json.dump(outcome, fh)


def _try_both(key: str) -> dict:
    """Emit to the undeclared asset (refusal expected), then to the declared one."""
    outcome: dict = {}
    try:
        AUTH_TARGET.emit(idempotency_key=f"{key}-undeclared")
        outcome["undeclared"] = {"raised": None}
    except AssetEmitError as err:
        outcome["undeclared"] = {
            "raised": type(err).__name__,
            "typed": isinstance(err, AssetEmitNotDeclaredError),
            "reason": err.reason,
            "status_code": err.status_code,
            "message": str(err),
        }
    outcome["declared"] = AUTH_DECLARED.emit(idempotency_key=f"{key}-declared", extra={"key": key}).id
    return outcome


with DAG("emit_auth_task", schedule=None):

    @task(outlets=[AUTH_DECLARED])
    def producer(run_id=None):
        _record(f"auth-task-{run_id}", _try_both(run_id))
        raise AirflowSkipException("emitted; publishes no outlet event")

    producer()


def _dag_callback(context):
    _record(f"auth-dag-callback-{context['run_id']}", _try_both(f"{context['run_id']}-dag"))


with DAG("emit_auth_dag_callback", schedule=None, on_failure_callback=_dag_callback):
    # The Dag failure callback may emit to the outlets of the Dag's tasks: this one never succeeds.
    @task(retries=0, outlets=[AUTH_DECLARED])
    def fails():
        raise RuntimeError("fails, so that the Dag failure callback runs")

    fails()


with DAG(
    "emit_auth_notifier",
    schedule=None,
    on_failure_callback=[
        AssetEventNotifier(AUTH_TARGET, extra={"via": "dag_notifier"}, idempotency_key="{{ run_id }}-dag-u"),
        AssetEventNotifier(
            AUTH_DECLARED, extra={"via": "dag_notifier"}, idempotency_key="{{ run_id }}-dag-d"
        ),
    ],
):

    @task(
        retries=0,
        outlets=[AUTH_DECLARED],
        on_failure_callback=[
            AssetEventNotifier(
                AUTH_TARGET, extra={"via": "task_notifier"}, idempotency_key="{{ run_id }}-task-u"
            ),
            AssetEventNotifier(
                AUTH_DECLARED, extra={"via": "task_notifier"}, idempotency_key="{{ run_id }}-task-d"
            ),
        ],
    )
    def fails_with_notifiers():
        raise RuntimeError("fails, so that the notifiers run")

    fails_with_notifiers()


with DAG("emit_auth_target_consumer", schedule=AUTH_TARGET):
    # Makes AUTH_TARGET an active asset, and would run on any event of it.
    @task
    def consume_target():
        return "ran"

    consume_target()


with DAG("emit_auth_declared_consumer", schedule=AUTH_DECLARED):

    @task
    def consume_declared():
        return "ran"

    consume_declared()
