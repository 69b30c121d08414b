"""
The asset.emit() demo Dags (examples/dags/asset_emit_*.py) run end to end; prints a summary.

Run with ``-s`` to see the receipts and the consumer runs.
"""

from __future__ import annotations

import pytest

from conftest import DEMO_DAGS

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(150),
    pytest.mark.skipif(not DEMO_DAGS, reason="examples/dags/asset_emit_*.py not found"),
]


def _runs(stack, dag_id: str) -> list[dict]:
    return stack.rest("GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100}).json()["dag_runs"]


def _task_log(stack, run_id: str, task_id: str, try_number: int) -> str:
    path = f"/dags/asset_emit_ingestion/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
    return stack.rest("GET", path, headers={"Accept": "text/plain"}).text[-3000:]


def test_demo_ingestion_resumes_and_consumers_run_per_batch(stack):
    run_id = stack.trigger("asset_emit_ingestion")
    assert stack.wait_run_finished("asset_emit_ingestion", run_id, timeout=90) == "success"

    events = [e for e in stack.events("demo_batch_ready") if e["source_run_id"] == run_id]
    keys = [f"batch-{n:04d}" for n in range(1, 6)]
    # Each batch exactly once, in order; then the outlet event of the task's success (no key): the
    # outlets declare what the task may emit to.
    assert [e["partition_key"] for e in events] == [*keys, None]
    assert [(e["source_task_id"], e["extra"]) for e in events][-1] == ("ingest", {})
    events = events[:-1]

    ti = stack.rest("GET", f"/dags/asset_emit_ingestion/dagRuns/{run_id}/taskInstances/ingest").json()
    assert ti["try_number"] == 2
    result = stack.rest(
        "GET", f"/dags/asset_emit_ingestion/dagRuns/{run_id}/taskInstances/ingest/xcomEntries/return_value"
    ).json()["value"]
    # Try 1 checkpointed batches 1-3 in the task state store and crashed at batch 4 (anything else
    # ending try 1 earlier shows in its log).
    assert result["resumed_after"] == 3, _task_log(stack, run_id, "ingest", try_number=1)
    assert [r["key"] for r in result["receipts"]] == keys[3:]

    def consumer_runs():
        runs = [r for r in _runs(stack, "asset_emit_batch_consumer") if r["state"] == "success"]
        return runs if {r["partition_key"] for r in runs} >= set(keys) else None

    runs = stack.wait_for(consumer_runs, timeout=60, what="a consumer run per batch")
    print("\n=== asset.emit() demo: ingestion ===")
    print(f"ingestion run {run_id}: try {ti['try_number']}, resumed after batch {result['resumed_after']}")
    for event in events:
        print(
            f"  event {event['id']:>3} {event['partition_key']} extra={event['extra']}"
            f" source={event['source_dag_id']}.{event['source_task_id']}"
        )
    for receipt in result["receipts"]:
        print(f"  receipt (retry) {receipt}")
    for run in sorted(runs, key=lambda r: r["partition_key"]):
        print(f"  consumer run {run['dag_run_id']} partition_key={run['partition_key']} state={run['state']}")


def test_demo_failure_signal_starts_cleanup(stack):
    run_id = stack.trigger("asset_emit_nightly_export")
    assert stack.wait_run_finished("asset_emit_nightly_export", run_id) == "failed"

    [signal] = stack.wait_for(
        lambda: [e for e in stack.events("demo_cleanup_needed") if e["source_run_id"] == run_id],
        timeout=60,
        what="the failure callback's signal",
    )
    assert signal["extra"] == {"failed_dag": "asset_emit_nightly_export", "failed_run": run_id}
    assert signal["source_task_id"] is None

    cleanup = stack.wait_for(
        lambda: [r for r in _runs(stack, "asset_emit_cleanup") if r["state"] == "success"],
        timeout=60,
        what="the cleanup run",
    )
    print("\n=== asset.emit() demo: failure signal ===")
    print(f"  signal event {signal['id']} extra={signal['extra']} source run={signal['source_run_id']}")
    for run in cleanup:
        print(f"  cleanup run {run['dag_run_id']} ({run['run_type']}) state={run['state']}")


def test_demo_undeclared_emit_is_refused_and_publishes_nothing(stack):
    """``asset_emit_undeclared`` emits to an asset its task does not declare: refused, nothing written."""
    run_id = stack.trigger("asset_emit_undeclared")
    assert stack.wait_run_finished("asset_emit_undeclared", run_id) == "success", stack.task_logs(
        "asset_emit_undeclared", run_id
    )
    refusal = stack.rest(
        "GET",
        f"/dags/asset_emit_undeclared/dagRuns/{run_id}/taskInstances/inject_batch/xcomEntries/return_value",
    ).json()["value"]
    assert (refusal["status_code"], refusal["reason"]) == (403, "asset_not_declared")
    assert refusal["message"].startswith(
        "Asset 'demo_batch_ready' is not declared by task 'inject_batch' of Dag 'asset_emit_undeclared'"
    )
    assert [
        e for e in stack.events("demo_batch_ready") if e["source_dag_id"] == "asset_emit_undeclared"
    ] == []
    assert [r for r in _runs(stack, "asset_emit_batch_consumer") if r["partition_key"] == "batch-9999"] == []
    print("\n=== asset.emit() demo: declared publication ===")
    print(f"  inject_batch refused: {refusal['message']}")


@pytest.mark.timeout(420)
def test_demo_failure_signal_loop_stops_at_the_limit(stack):
    """``asset_emit_loop``: the investigate loop stops at ``[core] asset_emit_max_chain_depth`` (3 here)."""
    from conftest import MAX_CHAIN_DEPTH

    run_id = stack.trigger("asset_emit_loop_incident")
    assert stack.wait_run_finished("asset_emit_loop_incident", run_id, timeout=120) == "failed"

    def stopped():
        return stack.query(
            "SELECT e.emit_chain_stop_reason AS reason FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE a.name = 'demo_investigate' AND e.emit_chain_stop_reason IS NOT NULL"
        )

    [row] = stack.wait_for(stopped, timeout=300, what="the demo loop's stopped event", logs=("scheduler",))
    assert f"longer than [core] asset_emit_max_chain_depth ({MAX_CHAIN_DEPTH})" in row["reason"]
    runs = [r for r in _runs(stack, "asset_emit_loop_investigate") if r["run_type"] == "asset_triggered"]
    assert len(runs) == MAX_CHAIN_DEPTH
    events = stack.query(
        "SELECT count(*) AS n FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = 'demo_investigate'"
    )
    assert events == [{"n": MAX_CHAIN_DEPTH + 1}]
    print(f"\ndemo loop: {len(runs)} investigate runs, then stopped: {row['reason']}")
