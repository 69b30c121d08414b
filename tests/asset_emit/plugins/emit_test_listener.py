"""Listener plugin for the asset.emit() tests: records every on_asset_event_emitted call."""

from __future__ import annotations

import json
import os

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin


class _Recorder:
    @hookimpl
    def on_asset_event_emitted(self, asset_event):
        out_dir = os.environ.get("EMIT_TEST_OUT")
        if not out_dir:
            return
        record = {
            "asset": asset_event.asset.name,
            "partition_key": asset_event.partition_key,
            "source_dag_id": asset_event.source_dag_id,
            "source_task_id": asset_event.source_task_id,
            "extra": asset_event.extra,
            "pid": os.getpid(),
        }
        with open(os.path.join(out_dir, "listener.jsonl"), "a") as fh:
            fh.write(json.dumps(record) + "\n")


class EmitTestListenerPlugin(AirflowPlugin):
    name = "emit_test_listener"
    listeners = [_Recorder()]
