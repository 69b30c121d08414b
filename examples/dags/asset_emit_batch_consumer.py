"""Demo: a partitioned consumer that handles each batch as soon as its event arrives (one run per key)."""

from __future__ import annotations

from airflow.sdk import Asset, PartitionedAssetTimetable, dag, task

BATCH_READY = Asset("demo_batch_ready")


@dag(schedule=PartitionedAssetTimetable(assets=BATCH_READY), tags=["asset-emit-demo"])
def asset_emit_batch_consumer():
    @task
    def handle_batch(dag_run=None, triggering_asset_events=None):
        rows = [event.extra.get("rows") for events in triggering_asset_events.values() for event in events]
        print(f"handling {dag_run.partition_key}: rows={rows}")
        return {"partition_key": dag_run.partition_key, "rows": rows}

    handle_batch()


asset_emit_batch_consumer()
