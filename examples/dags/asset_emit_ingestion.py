"""
Demo: an ingestion task that publishes each batch the moment it is committed.

The task works through five batches. For each one it (1) commits the data, (2) emits
``demo_batch_ready`` with the partition key ``batch-000N`` and (3) checkpoints the batch number
in the task state store. On its first try it crashes at batch 4; batches 1-3 stay published and
their consumers run. The retry reads the checkpoint and resumes at batch 4.

Emitting *before* checkpointing, with the partition key as idempotency key, makes a crash
between the two harmless: the retry emits the same batch again and the server answers with the
original event (``receipt.deduplicated``) instead of creating a second one.

The task may emit only to the assets it declares, its ``outlets`` (``[core]
asset_emit_authorization = declared``, the default). An outlet is also published when the task
succeeds: that last event has no partition key, and the partitioned consumer starts no run for it.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Asset, dag, task

BATCH_READY = Asset("demo_batch_ready")
BATCHES = 5


@dag(schedule=None, tags=["asset-emit-demo"])
def asset_emit_ingestion():
    @task(retries=1, retry_delay=timedelta(seconds=2), outlets=[BATCH_READY])
    def ingest(**context):
        store = context["task_state_store"]
        ti = context["ti"]
        resume_after = store.get("last_committed_batch", 0)
        print(f"try {ti.try_number}: resuming after batch {resume_after}")
        receipts = []
        for n in range(resume_after + 1, BATCHES + 1):
            key = f"batch-{n:04d}"
            if n == 4 and ti.try_number == 1:
                raise RuntimeError(f"simulated crash while loading {key}")
            rows = 1000 * n  # ... the batch would be loaded and committed here ...
            receipt = BATCH_READY.emit(partition_key=key, extra={"rows": rows}, idempotency_key=key)
            store.set("last_committed_batch", n)
            print(
                f"RECEIPT {key}: event {receipt.id} at {receipt.timestamp} deduplicated={receipt.deduplicated}"
            )
            receipts.append({"key": key, "event_id": receipt.id, "deduplicated": receipt.deduplicated})
        return {"resumed_after": resume_after, "receipts": receipts}

    ingest()


asset_emit_ingestion()
