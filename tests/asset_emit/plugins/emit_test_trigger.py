"""A trigger that tries Asset.emit() in the triggerer, and the operator that defers to it."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator
from airflow.triggers.base import BaseTrigger, TriggerEvent


class EmitFromTrigger(BaseTrigger):
    """Calls ``aemit()`` from ``run()`` and reports what happened in its event."""

    def __init__(self, asset_name: str) -> None:
        super().__init__()
        self.asset_name = asset_name

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("emit_test_trigger.EmitFromTrigger", {"asset_name": self.asset_name})

    async def run(self):
        from airflow.sdk import Asset
        from airflow.sdk.exceptions import AssetEmitError

        try:
            await Asset(self.asset_name).aemit(extra={"from": "trigger"})
            outcome: dict[str, Any] = {"raised": None}
        except AssetEmitError as err:
            outcome = {"raised": type(err).__name__, "reason": err.reason, "message": str(err)}
        yield TriggerEvent(outcome)


class EmitFromTriggerOperator(BaseOperator):
    def __init__(self, *, asset_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.asset_name = asset_name

    def execute(self, context):
        self.defer(trigger=EmitFromTrigger(self.asset_name), method_name="resume")

    def resume(self, context, event=None):
        return event
