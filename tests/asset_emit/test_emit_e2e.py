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
import re

import pytest


pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


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

    keys = stack.wait_for(consumer_runs, timeout=60, what="one consumer run per emitted partition")
    assert keys.count("batch-0001") == 1 and keys.count("batch-0002") == 1


def _wait_with_logs(stack, predicate, timeout, what):
    """stack.wait_for, printing the Dag processor's per-file logs too (and the components') if it times out."""
    try:
        return stack.wait_for(predicate, timeout=timeout, what=what, logs=("dag-processor", "scheduler"))
    except TimeoutError:
        for path in sorted((stack.home / "logs" / "dag_processor").rglob("emit_test_dags.py.log")):
            print(path, "\n", "\n".join(path.read_text(errors="replace").splitlines()[-200:]))
        raise


@pytest.mark.timeout(480)
def test_emission_from_every_callback_kind(stack):
    run_id = stack.trigger("emit_test_callbacks")
    success_run_id = stack.trigger("emit_test_dag_success")
    assert stack.wait_run_finished("emit_test_callbacks", run_id, timeout=120) == "failed"

    task_kinds = {"execute_cb", "success", "task_notifier", "retry", "failure"}

    def signals(required: set[str]):
        found = {
            e["extra"]["kind"]: e
            for e in stack.events("emit_test_callback_signal")
            # (not the outlet event of ok's success: its outlets declare what it emits)
            if e["source_run_id"] == run_id and "kind" in (e["extra"] or {})
        }
        return found if required <= set(found) else None

    # Task callbacks run in the task processes: their events are there once the run has failed.
    stack.wait_for(lambda: signals(task_kinds), timeout=60, what="the task callbacks' events")
    # The Dag processor runs Dag callbacks when it next processes the file: allow for a busy machine.
    # (emit_test_dag_success's callback often runs just before, so this one tends to arrive while the
    # file is being parsed: see test_dag_callback_that_arrives_while_the_file_is_being_parsed.)
    by_kind = _wait_with_logs(
        stack, lambda: signals(task_kinds | {"dag_failure"}), 240, "the Dag failure callback's event"
    )
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
    assert dag_event["source_map_index"] == -1

    # The Dag on_success_callback (Dag processor): the Dag and the run, no task.
    assert stack.wait_run_finished("emit_test_dag_success", success_run_id) == "success"
    [success] = _wait_with_logs(
        stack,
        lambda: [
            e for e in stack.events("emit_test_callback_signal") if e["source_run_id"] == success_run_id
        ],
        150,
        "the Dag success callback's event",
    )
    assert success["extra"] == {"kind": "dag_success"}
    assert (success["source_dag_id"], success["source_task_id"], success["source_map_index"]) == (
        "emit_test_dag_success",
        None,
        -1,
    )

    # The Dag-level notifier's operational signal (templated extra), which the Dag processor emits
    # after the first Dag callback (wait: the dag_failure event can be seen before it lands) ...
    def ops_signal():
        return [e for e in stack.events("emit_test_ops_signal") if e["source_run_id"] == run_id]

    [ops] = _wait_with_logs(stack, ops_signal, 60, "the Dag-level notifier's event")
    assert ops["extra"] == {"failed_run": run_id}
    assert ops["source_task_id"] is None

    # ... schedules the cleanup Dag.
    def cleanup_run():
        resp = stack.rest("GET", "/dags/emit_test_cleanup/dagRuns", params={"limit": 50})
        return [r for r in resp.json()["dag_runs"] if r["run_type"] == "asset_triggered"]

    assert stack.wait_for(cleanup_run, timeout=60, what="the cleanup Dag run triggered by the signal")


def _pending_dag_processor_callbacks(run_id: str) -> int:
    """How many Dag processor callback requests for ``run_id`` wait in the database."""
    from sqlalchemy import select

    from airflow.models.db_callback_request import DbCallbackRequest
    from airflow.utils.session import create_session

    with create_session() as session:
        return sum(run_id in str(cb.data) for cb in session.scalars(select(DbCallbackRequest)))


@pytest.mark.timeout(480)
def test_dag_callback_that_arrives_while_the_file_is_being_parsed(stack):
    """
    A Dag callback requested while the Dag processor parses the Dag's file still runs, at once.

    The race behind the lost ``dag_failure`` event of test_emission_from_every_callback_kind,
    created on purpose. Every callback run is followed by a regular parse of the file (a
    callback-only run leaves the file's last parse time unset); when the next Dag callback of the
    file arrives during that parse, Airflow 3.3.2 dropped the file from the queue and, the file
    having just been parsed, let the callback wait for the next regular parse
    ([dag_processor] min_file_process_interval: 600 s here). Here one regular parse of
    emit_test_dags.py in the Dag processor is held (see _hold_this_parse_if_asked in the Dag file)
    while emit_test_fail_while_busy fails and the Dag processor takes its callback request.
    """
    out = stack.out
    for name in ("hold-parse.started", "hold-parse.release", "hold-parse.ended"):
        (out / name).unlink(missing_ok=True)
    (out / "hold-parse.request").touch()
    try:
        details = stack.rest("GET", "/dags/emit_test_fail_while_busy/details")
        assert details.status_code == 200, details.text
        reparse = stack.rest("PUT", f"/parseDagFile/{details.json()['file_token']}")
        assert reparse.status_code in (200, 201), reparse.text
        stack.wait_for(
            (out / "hold-parse.started").exists, timeout=120, what="the Dag processor to start the held parse"
        )

        fail_run = stack.trigger("emit_test_fail_while_busy")
        assert stack.wait_run_finished("emit_test_fail_while_busy", fail_run, timeout=90) == "failed"
        # The race: the Dag processor's manager takes the run's failure callback request from the
        # database while the file is being parsed. Wait for it to have queued that request (its
        # debug line, see conftest.py) -- not only for no request to be pending, which holds before
        # the scheduler wrote one too.
        queued = "Queuing DagCallbackRequest CallbackRequest: "

        def queued_at() -> int | None:
            text = stack.log_text("dag-processor")
            at = [m.start() for m in re.finditer(re.escape(queued), text)]
            return next((i for i in at if fail_run in text[i : text.find("\n", i)]), None)

        at = stack.wait_for(
            queued_at,
            timeout=60,
            what="the Dag processor to take the failure callback request",
            logs=("dag-processor",),
        )
        assert _pending_dag_processor_callbacks(fail_run) == 0
        # Let the manager go round its loop (it fetches callbacks once a loop) a few times with the
        # callback queued for the busy file: had it started a processor for it, it would be now.
        loops = "Fetching callbacks from the database."
        stack.wait_for(
            lambda: stack.log_text("dag-processor")[at:].count(loops) >= 3,
            timeout=60,
            what="three loops of the Dag processor's manager",
            logs=("dag-processor",),
        )
        # The parse was busy all along, and the callback has not run in parallel with it.
        assert not (out / "hold-parse.ended").exists()
        assert [e for e in stack.events("emit_test_callback_signal") if e["source_run_id"] == fail_run] == []
    finally:
        (out / "hold-parse.release").touch()

    [event] = _wait_with_logs(
        stack,
        lambda: [e for e in stack.events("emit_test_callback_signal") if e["source_run_id"] == fail_run],
        90,
        "the Dag failure callback requested while its file was being parsed",
    )
    assert event["extra"] == {"kind": "dag_failure_while_busy"}
    assert (event["source_dag_id"], event["source_task_id"]) == ("emit_test_fail_while_busy", None)


def test_emit_at_parse_time_raises_and_writes_nothing(stack):
    outcomes = [json.loads(p.read_text()) for p in stack.out.glob("parse-*.json")]
    assert outcomes, "the Dag file was never parsed"
    for outcome in outcomes:
        assert outcome["raised"] == "AssetEmitError"
        assert outcome["reason"] == "not_at_runtime"
        assert "parsed" in outcome["message"]
    assert stack.events("emit_test_parse_target") == []


def test_bad_input_through_the_sdk(stack, other_seed_ti):
    # Another Dag holds the key the task will try: the SDK raises, naming the asset and the key.
    claimed = stack.emit(
        stack.token_for(other_seed_ti["id"]),
        {"name": "emit_test_api_target", "idempotency_key": "sdk-foreign-key"},
    )
    assert claimed.status_code in (200, 201), claimed.text
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
    assert reasons["foreign_key"] == "idempotency_key_in_use"
    assert reasons["foreign_key_status"] == 409
    assert "'emit_test_api_target'" in reasons["foreign_key_message"]
    assert "'sdk-foreign-key'" in reasons["foreign_key_message"]
    assert "another producer" in reasons["foreign_key_message"]
    assert reasons["async_receipt"]["deduplicated"] is False
    events = [e for e in stack.events("emit_test_api_target") if e["source_run_id"] == run_id]
    # The emitted event, and the outlet event of the task's success (its outlets declare what it emits).
    assert [e["id"] for e in events if e["extra"]] == [reasons["async_receipt"]["id"]]
    assert len(events) == 2, events
    assert stack.events("emit_test_never_declared") == []


@pytest.mark.timeout(420)
def test_emit_under_dag_test(stack):
    """dag.test() runs the task in-process; its supervisor vouches for the task instance."""
    import os
    import subprocess
    import sys
    import uuid

    # dag.test() runs its tasks itself; the stack's scheduler must not run them first. It would, for
    # an unpaused Dag: the run's task is SCHEDULED in the shared database (on a loaded machine
    # dag.test()'s in-process Execution API takes long enough to start for the scheduler to win, and
    # its worker then emits without this test's key).
    paused = stack.rest("PATCH", "/dags/emit_test_dag_test", json={"is_paused": True})
    assert paused.status_code == 200, paused.text
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
        # A bound against a hang only: dag.test() starts its own in-process Execution API and runs
        # the task in this process tree (about 30 s on a loaded machine; 90 s was exceeded in CI
        # with both lines' suites and other builds running).
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    from sqlalchemy import select

    from airflow.models.asset_event_idempotency import AssetEventIdempotencyKey
    from airflow.utils.session import create_session

    with create_session() as session:
        event_id = session.scalar(
            select(AssetEventIdempotencyKey.asset_event_id).where(
                AssetEventIdempotencyKey.idempotency_key == key
            )
        )
    events = [e for e in stack.events("emit_test_api_target") if e["id"] == event_id]
    assert len(events) == 1, (proc.stdout[-3000:], proc.stderr[-3000:])
    [event] = events
    assert (event["source_dag_id"], event["source_task_id"]) == ("emit_test_dag_test", "emit_in_dag_test")
    # The event is of dag.test()'s own run, which succeeded.
    runs = stack.rest("GET", "/dags/emit_test_dag_test/dagRuns", params={"limit": 100}).json()["dag_runs"]
    [run] = [r for r in runs if r["dag_run_id"] == event["source_run_id"]]
    assert run["state"] == "success", run


def test_dag_processor_refuses_a_forged_source(stack):
    """A Dag callback in the real Dag processor emits as another Dag's run: refused, nothing written."""
    run_id = stack.trigger("emit_test_forge")
    assert stack.wait_run_finished("emit_test_forge", run_id) == "success"
    path = stack.out / f"forge-{run_id}.json"
    outcome = json.loads(
        stack.wait_for(lambda: path.exists() and path.read_text(), timeout=150, what="the forging callback")
    )
    # Through the child's channel to the Dag processor: a typed refusal naming the forged source,
    # not a generic error and not an imitated HTTP status (nothing reached the Execution API).
    assert outcome["comms"]["type"] == "AssetEventEmitSourceRefused", outcome["comms"]
    assert "status_code" not in outcome["comms"]
    assert (outcome["comms"]["source"]["dag_id"], outcome["comms"]["source"]["run_id"]) == (
        "emit_test_seed",
        f"forged-{run_id}",
    )
    # Through a plain in-process Execution API of the child's own: it does not vouch for sources
    # (403). The Dag processor child has no metadata-database session either (Airflow blocks ORM
    # access there), so such an app may already fail to open a session (500); either way it
    # cannot write.
    attempt = outcome["in_process_api"]
    assert (attempt["status_code"], attempt["reason"]) in ((403, "source_not_allowed"), (500, None)), attempt
    forged = [e for e in stack.events("emit_test_api_target") if e["source_run_id"] == f"forged-{run_id}"]
    assert forged == []
    assert not [e for e in stack.events("emit_test_api_target") if e["source_dag_id"] == "emit_test_forge"]
    # The callback's own emit, with its own run as the source, went through.
    [own] = [e for e in stack.events("emit_test_callback_signal") if e["id"] == outcome["own"]]
    assert (own["source_dag_id"], own["source_run_id"], own["source_task_id"]) == (
        "emit_test_forge",
        run_id,
        None,
    )


def test_trigger_cannot_emit(stack):
    """A trigger calling aemit() in the real triggerer gets a clear error; nothing is written."""
    before = [e for e in stack.events("emit_test_api_target") if e["extra"] == {"from": "trigger"}]
    run_id = stack.trigger("emit_test_trigger")
    state = stack.wait_run_finished("emit_test_trigger", run_id, timeout=180)
    assert state == "success", stack.task_logs("emit_test_trigger", run_id) + stack.log_tails("triggerer")
    resp = stack.rest(
        "GET", f"/dags/emit_test_trigger/dagRuns/{run_id}/taskInstances/deferred/xcomEntries/return_value"
    )
    assert resp.status_code == 200, resp.text
    value = resp.json()["value"]
    outcome = value if isinstance(value, dict) else json.loads(value)
    assert outcome["raised"] == "AssetEmitError"
    assert outcome["reason"] == "not_in_trigger"
    assert "trigger" in outcome["message"]
    assert [e for e in stack.events("emit_test_api_target") if e["extra"] == {"from": "trigger"}] == before
