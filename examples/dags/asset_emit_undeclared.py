"""
Demo: a task may emit only to the assets it declares; anything else is refused, nothing is published.

``inject_batch`` does not declare ``demo_batch_ready`` (``asset_emit_ingestion`` does: it is that
Dag's output) and tries to publish a batch on it anyway, which would start a run of
``asset_emit_batch_consumer``. With ``[core] asset_emit_authorization = declared`` (the default)
the api-server refuses with 403 ``asset_not_declared`` and the Task SDK raises
``AssetEmitNotDeclaredError``, whose message names the asset and the producer. No event is
written and no consumer run starts. The task catches the error, logs the refusal and succeeds: the
refusal is the outcome this Dag demonstrates. A task that means to publish an asset lists it in
its ``outlets``.
"""

from __future__ import annotations

from airflow.sdk import Asset, dag, task
from airflow.sdk.exceptions import AssetEmitNotDeclaredError

BATCH_READY = Asset("demo_batch_ready")  # declared by asset_emit_ingestion's task, not by this one


@dag(schedule=None, tags=["asset-emit-demo"])
def asset_emit_undeclared():
    @task  # no outlets: this task declares no asset
    def inject_batch():
        try:
            BATCH_READY.emit(partition_key="batch-9999", extra={"rows": 1})
        except AssetEmitNotDeclaredError as err:
            print(f"REFUSED ({err.status_code} {err.reason}): {err}")
            return {"status_code": err.status_code, "reason": err.reason, "message": str(err)}
        raise RuntimeError("the undeclared emit was accepted: is [core] asset_emit_authorization = any?")

    inject_batch()


asset_emit_undeclared()
