"""Demo summary for asset.emit(): receipts of the ingestion run, consumer runs, the failure signal."""

from __future__ import annotations

import json

from _common import latest_run, run_finished

TITLE = "Explicit asset-event emission (asset_emit_ingestion, asset_emit_nightly_export)"
FEATURES = ("asset-emit",)  # the demo shows this module on a line that carries these whole
DAG_IDS = [
    "asset_emit_ingestion",
    "asset_emit_batch_consumer",
    "asset_emit_nightly_export",
    "asset_emit_cleanup",
]
TRIGGER = ["asset_emit_ingestion", "asset_emit_nightly_export"]
UNPAUSE_ONLY = ["asset_emit_batch_consumer", "asset_emit_cleanup"]
TIMEOUT = 240
BATCHES = [f"batch-{n:04d}" for n in range(1, 6)]


def _consumer_runs() -> list:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        runs = session.query(DagRun).filter(DagRun.dag_id == "asset_emit_batch_consumer").all()
        return [(r.run_id, r.partition_key, str(r.state)) for r in runs]


def finished() -> bool:
    if not (run_finished("asset_emit_ingestion") and run_finished("asset_emit_nightly_export")):
        return False
    done = {key for _, key, state in _consumer_runs() if state in ("success", "failed")}
    cleanup = latest_run("asset_emit_cleanup")
    return done >= set(BATCHES) and cleanup is not None and str(cleanup.state) in ("success", "failed")


def summarize() -> list[str]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    ingestion = latest_run("asset_emit_ingestion")
    lines = [f"ingestion run {ingestion.run_id}: {ingestion.state}"]
    with create_session() as session:
        events = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.name == "demo_batch_ready", AssetEvent.source_run_id == ingestion.run_id)
            .order_by(AssetEvent.id)
            .all()
        )
        for event in events:
            if event.partition_key is None:
                lines.append(f"  event {event.id} (no key): the outlet event of the task's success")
                continue
            lines.append(
                f"  event {event.id} {event.partition_key} extra={json.dumps(event.extra)} "
                f"from {event.source_task_id}, persisted when emitted"
            )
        value = (
            session.query(XComModel.value)
            .filter(
                XComModel.dag_id == "asset_emit_ingestion",
                XComModel.run_id == ingestion.run_id,
                XComModel.key == "return_value",
            )
            .scalar()
        )
    if value is not None:
        result = json.loads(value) if isinstance(value, str) else value
        done = result.get("resumed_after")
        lines.append(f"  try 1 emitted batches 1-{done}, then failed; those events stay published")
        lines.append(f"  try 2 resumed after batch {done} (task state store checkpoint)")
        for receipt in result.get("receipts", []):
            lines.append(f"  receipt: {receipt}")
    for run_id, key, state in sorted(_consumer_runs(), key=lambda r: r[1] or ""):
        lines.append(f"consumer run {run_id}: partition_key={key} {state}")
    export = latest_run("asset_emit_nightly_export")
    cleanup = latest_run("asset_emit_cleanup")
    lines.append(f"nightly export run {export.run_id}: {export.state}; its failure callback emitted the signal")
    lines.append(f"cleanup run {cleanup.run_id if cleanup else '-'}: {cleanup.state if cleanup else 'not started'}")
    return lines
