"""
Asset.emit() end to end: real Dag processor, scheduler, LocalExecutor task processes, api-server.

* a task emits two partitions and then raises: both events stay, the partitioned consumer gets
  one run per partition key, and the task's failure does not retract anything;
* emission from every callback kind (on_execute, on_success, on_retry after the try has been
  archived, on_failure, and the Dag on_failure callback run by the Dag processor with no TI),
  each with the right provenance; the notifier at task and Dag level; the Dag-level signal
  triggers an asset-scheduled cleanup Dag;
* an emit while the Dag file is parsed raises and writes nothing;
* bad input through the SDK raises AssetEmitError with the server's reason; aemit() works.
"""

from __future__ import annotations

import json

import pytest

from conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_task_emits_two_partitions_then_fails(stack):
    run_id = stack.trigger("emit_test_partial_failure")
    assert stack.wait_run_finished("emit_test_partial_failure", run_id) == "failed"

    events = [e for e in stack.events("emit_test_batches") if e["source_run_id"] == run_id]
    assert [e["partition_key"] for e in events] == ["batch-0001", "batch-0002"]
    assert {(e["source_dag_id"], e["source_task_id"], e["source_map_index"]) for e in events} == {
        ("emit_test_partial_failure", "ingest", -1)
    }
    assert [e["extra"] for e in events] == [{"n": 1}, {"n": 2}]

    def consumer_runs():
        resp = stack.rest("GET", "/dags/emit_test_batch_consumer/dagRuns", params={"limit": 50})
        keys = sorted(r["partition_key"] for r in resp.json()["dag_runs"])
        return keys if {"batch-0001", "batch-0002"} <= set(keys) else None

    keys = wait_for(consumer_runs, 60, "one consumer run per emitted partition")
    assert keys.count("batch-0001") == 1 and keys.count("batch-0002") == 1


def test_emission_from_every_callback_kind(stack):
    run_id = stack.trigger("emit_test_callbacks")
    assert stack.wait_run_finished("emit_test_callbacks", run_id, timeout=60) == "failed"

    def signals():
        found = {
            e["extra"]["kind"]: e
            for e in stack.events("emit_test_callback_signal")
            if e["source_run_id"] == run_id
        }
        return found if "dag_failure" in found else None

    by_kind = wait_for(signals, 60, "the Dag failure callback's event")
    assert set(by_kind) == {"execute_cb", "success", "task_notifier", "retry", "failure", "dag_failure"}
    for kind, task_id in [
        ("execute_cb", "ok"),
        ("success", "ok"),
        ("task_notifier", "ok"),
        ("retry", "flaky"),
        ("failure", "flaky"),
    ]:
        event = by_kind[kind]
        assert (event["source_dag_id"], event["source_task_id"], event["source_map_index"]) == (
            "emit_test_callbacks",
            task_id,
            -1,
        ), kind
    dag_event = by_kind["dag_failure"]
    assert (dag_event["source_dag_id"], dag_event["source_task_id"]) == ("emit_test_callbacks", None)
    assert dag_event["source_run_id"] == run_id

    # The Dag-level notifier's operational signal (templated extra) ...
    [ops] = [e for e in stack.events("emit_test_ops_signal") if e["source_run_id"] == run_id]
    assert ops["extra"] == {"failed_run": run_id}
    assert ops["source_task_id"] is None

    # ... schedules the cleanup Dag.
    def cleanup_run():
        resp = stack.rest("GET", "/dags/emit_test_cleanup/dagRuns", params={"limit": 50})
        return [r for r in resp.json()["dag_runs"] if r["run_type"] == "asset_triggered"]

    assert wait_for(cleanup_run, 60, "the cleanup Dag run triggered by the signal")


def test_emit_at_parse_time_raises_and_writes_nothing(stack):
    outcomes = [json.loads(p.read_text()) for p in stack.out_dir.glob("parse-*.json")]
    assert outcomes, "the Dag file was never parsed"
    for outcome in outcomes:
        assert outcome["raised"] == "AssetEmitError"
        assert outcome["reason"] == "not_at_runtime"
        assert "parsed" in outcome["message"]
    assert stack.events("emit_test_parse_target") == []


def test_bad_input_through_the_sdk(stack):
    run_id = stack.trigger("emit_test_sdk_errors")
    assert stack.wait_run_finished("emit_test_sdk_errors", run_id) == "success"
    resp = stack.rest(
        "GET",
        f"/dags/emit_test_sdk_errors/dagRuns/{run_id}/taskInstances/bad_inputs/xcomEntries/return_value",
    )
    assert resp.status_code == 200, resp.text
    value = resp.json()["value"]
    reasons = value if isinstance(value, dict) else json.loads(value)
    assert reasons["unknown"] == "asset_not_found"
    assert reasons["naive_date"] == "naive_partition_date"
    assert reasons["date_without_key"] == "partition_date_without_key"
    assert reasons["non_json"] == "invalid_extra"
    assert reasons["long_key"] == "partition_key_too_long"
    assert reasons["too_large"] == "extra_too_large"
    assert reasons["async_receipt"]["deduplicated"] is False
    events = [e for e in stack.events("emit_test_api_target") if e["source_run_id"] == run_id]
    assert [e["id"] for e in events] == [reasons["async_receipt"]["id"]]
    assert stack.events("emit_test_never_declared") == []


def test_emit_under_dag_test(stack):
    """dag.test() runs the task in-process; its supervisor vouches for the task instance."""
    import os
    import subprocess
    import sys
    import uuid

    key = f"dag-test-{uuid.uuid4()}"
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import emit_test_dags; emit_test_dags.dag_test_dag.test()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(stack.home / "dags")],
        env={**os.environ, "EMIT_TEST_DAG_TEST_KEY": key},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    from sqlalchemy import select

    from airflow.models.asset_event_idempotency import AssetEventIdempotencyKey
    from airflow.utils.session import create_session

    with create_session() as session:
        event_id = session.scalar(
            select(AssetEventIdempotencyKey.asset_event_id).where(AssetEventIdempotencyKey.idempotency_key == key)
        )
    [event] = [e for e in stack.events("emit_test_api_target") if e["id"] == event_id]
    assert (event["source_dag_id"], event["source_task_id"]) == ("emit_test_dag_test", "emit_in_dag_test")
