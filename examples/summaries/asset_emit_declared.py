"""Demo summary for declared publication: the undeclared emit of asset_emit_undeclared is refused."""

from __future__ import annotations

import json

from _common import latest_run, run_finished, tries

TITLE = "Declared publication: an emit to an undeclared asset is refused (asset_emit_undeclared)"
FEATURES = ("asset-emit",)  # the demo shows this module on a line that carries these whole
DAG_IDS = ["asset_emit_undeclared"]
TRIGGER = ["asset_emit_undeclared"]
TIMEOUT = 120
ASSET = "demo_batch_ready"
PARTITION_KEY = "batch-9999"


def finished() -> bool:
    return run_finished("asset_emit_undeclared")


def summarize() -> list[str]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    run = latest_run("asset_emit_undeclared")
    lines = [f"run {run.run_id}: {run.state}"]
    for t in tries("asset_emit_undeclared", run.run_id):
        lines.append(f"  {t['task_id']} (no outlets) try {t['try_number']}: {t['state']}")
    with create_session() as session:
        value = (
            session.query(XComModel.value)
            .filter(
                XComModel.dag_id == "asset_emit_undeclared",
                XComModel.run_id == run.run_id,
                XComModel.task_id == "inject_batch",
                XComModel.key == "return_value",
            )
            .scalar()
        )
        events = (
            session.query(AssetEvent.id)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.name == ASSET, AssetEvent.source_dag_id == "asset_emit_undeclared")
            .count()
        )
        consumer_runs = (
            session.query(DagRun.run_id)
            .filter(DagRun.dag_id == "asset_emit_batch_consumer", DagRun.partition_key == PARTITION_KEY)
            .count()
        )
    refusal = json.loads(value) if isinstance(value, str) else value
    if refusal:
        lines.append(
            f"  {ASSET}.emit(partition_key={PARTITION_KEY!r}) refused: "
            f"{refusal['status_code']} {refusal['reason']} (AssetEmitNotDeclaredError)"
        )
        lines.append(f"  refusal: {refusal['message']}")
    else:
        lines.append(
            f"  {ASSET}.emit(partition_key={PARTITION_KEY!r}): no refusal recorded (see the task log)"
        )
    lines.append(
        f"events of {ASSET} from asset_emit_undeclared: {events or 'none'}; "
        f"consumer runs for {PARTITION_KEY}: {consumer_runs or 'none'}"
    )
    return lines
