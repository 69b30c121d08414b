"""Dags for the asset.emit() end-to-end tests (copied into the test AIRFLOW_HOME's dags folder)."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, Asset, PartitionedAssetTimetable, task
from airflow.sdk.definitions.asset.notifier import AssetEventNotifier
from airflow.sdk.exceptions import AirflowSkipException, AssetEmitError

BATCHES = Asset("emit_test_batches")
CB_SIGNAL = Asset("emit_test_callback_signal")
OPS_SIGNAL = Asset("emit_test_ops_signal")
API_TARGET = Asset("emit_test_api_target")
PARSE_TARGET = Asset("emit_test_parse_target")
#: Declared as an inlet by emit_test_seed; test_emit_teams.py gives it a user in another team.
TEAM_ASSET = Asset("emit_test_team_asset", uri="emit-test://team/asset")

# Emitting while the file is parsed must fail (and persist nothing); record what happened.
try:
    PARSE_TARGET.emit(extra={"at": "parse"})
    _parse_outcome = {"raised": None}
except AssetEmitError as err:
    _parse_outcome = {"raised": type(err).__name__, "reason": err.reason, "message": str(err)}
if out_dir := os.environ.get("EMIT_TEST_OUT"):
    with open(os.path.join(out_dir, f"parse-{os.getpid()}.json"), "w") as fh:
        json.dump(_parse_outcome, fh)


def _hold_this_parse_if_asked() -> None:
    """
    Keep this parse of the file in the Dag processor busy while a test asks for it.

    test_dag_callback_that_arrives_while_the_file_is_being_parsed drops ``hold-parse.request``
    into EMIT_TEST_OUT and asks the Dag processor to reparse this file; the one Dag processor
    parse that claims the request (by renaming it) waits until ``hold-parse.release`` appears.
    Task processes and every other parse go on at once.
    """
    import sys
    import time

    out = os.environ.get("EMIT_TEST_OUT")
    if not out or "dag-processor" not in sys.argv:
        return
    request = os.path.join(out, "hold-parse.request")
    try:
        os.rename(request, f"{request}.{os.getpid()}")
    except FileNotFoundError:
        return
    with open(os.path.join(out, "hold-parse.started"), "w") as fh:
        fh.write(str(os.getpid()))
    deadline = time.monotonic() + 150
    try:
        while not os.path.exists(os.path.join(out, "hold-parse.release")):
            if time.monotonic() > deadline:
                raise TimeoutError("the test never released the Dag processor")
            time.sleep(0.2)
    finally:
        open(os.path.join(out, "hold-parse.ended"), "w").close()


_hold_this_parse_if_asked()


def _declare(task_id, *assets):
    """
    A task whose outlets declare the Dag's emitted assets, and which publishes none of them.

    A Dag-level callback may emit to the outlets of its Dag's tasks ([core]
    asset_emit_authorization = declared). This task skips itself, so that success publishes no
    outlet event that the tests would have to tell apart from the emitted ones.
    """

    @task(task_id=task_id, outlets=list(assets))
    def _skip():
        raise AirflowSkipException("declares what the Dag emits; publishes nothing itself")

    return _skip()


with DAG("emit_test_seed", schedule=None):
    # A run of this Dag gives the route tests a task instance to mint tokens for; its outlets are
    # what that token may emit to. It skips itself, so that its outlets publish nothing.
    @task(inlets=[API_TARGET, CB_SIGNAL, PARSE_TARGET, TEAM_ASSET], outlets=[API_TARGET, TEAM_ASSET])
    def seed():
        raise AirflowSkipException("a token's identity, not a producer")

    seed()


with DAG("emit_test_seed_other", schedule=None):
    # A second producing Dag: idempotency keys are scoped to their producer.
    @task(inlets=[API_TARGET], outlets=[API_TARGET])
    def seed_other():
        raise AirflowSkipException("a token's identity, not a producer")

    seed_other()


with DAG("emit_test_partial_failure", schedule=None):

    @task(retries=0, outlets=[BATCHES])
    def ingest():
        receipts = [BATCHES.emit(partition_key=f"batch-000{n}", extra={"n": n}) for n in (1, 2)]
        print("RECEIPTS", [r.id for r in receipts])
        raise RuntimeError("batch 3 is corrupt")

    ingest()


with DAG("emit_test_batch_consumer", schedule=PartitionedAssetTimetable(assets=BATCHES)):

    @task
    def consume(dag_run=None):
        return dag_run.partition_key

    consume()


def _emit(kind):
    def callback(context):
        CB_SIGNAL.emit(idempotency_key=f"{context['run_id']}-{kind}", extra={"kind": kind})

    callback.__name__ = f"emit_on_{kind}"
    return callback


with DAG(
    "emit_test_callbacks",
    schedule=None,
    on_failure_callback=[
        _emit("dag_failure"),
        AssetEventNotifier(
            OPS_SIGNAL, extra={"failed_run": "{{ run_id }}"}, idempotency_key="{{ run_id }}-ops"
        ),
    ],
):
    # Its success publishes CB_SIGNAL as an outlet too (an event without "kind" in extra).
    @task(
        outlets=[CB_SIGNAL],
        on_execute_callback=_emit("execute_cb"),
        on_success_callback=[
            _emit("success"),
            AssetEventNotifier(
                Asset.ref(name=CB_SIGNAL.name),
                idempotency_key="{{ run_id }}-task-notifier",
                extra={"kind": "task_notifier"},
            ),
        ],
    )
    def ok():
        return "ok"

    @task(
        retries=1,
        retry_delay=timedelta(seconds=1),
        # Also the declaration of the Dag failure callbacks' OPS_SIGNAL (it never succeeds).
        outlets=[CB_SIGNAL, OPS_SIGNAL],
        on_retry_callback=_emit("retry"),
        on_failure_callback=_emit("failure"),
    )
    def flaky():
        raise RuntimeError("always fails")

    ok() >> flaky()


with DAG("emit_test_dag_success", schedule=None, on_success_callback=_emit("dag_success")):
    # The Dag on_success_callback runs in the Dag processor: the event's source is the run, no task.
    @task
    def fine():
        return "ok"

    fine()
    _declare("declares_signal", CB_SIGNAL)


with DAG("emit_test_fail_while_busy", schedule=None, on_failure_callback=_emit("dag_failure_while_busy")):
    # Fails at once; its Dag on_failure_callback is requested while the file is being processed.
    @task(retries=0, outlets=[CB_SIGNAL])
    def fail_now():
        raise RuntimeError("fails at once")

    fail_now()


def _forge(context):
    """
    A Dag callback (run by the Dag processor) that tries to emit as another Dag's run.

    Two ways: an EmitAssetEvent whose callback_source names emit_test_seed, sent through the
    child's supervisor channel; and a default in-process Execution API built in the child,
    with the forged source in the body. It records what each attempt answered.
    """
    from airflow.sdk.api.datamodels._generated import AssetEventEmitSource
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import EmitAssetEvent

    forged = AssetEventEmitSource(dag_id="emit_test_seed", run_id=f"forged-{context['run_id']}")
    outcome = {}
    resp = task_runner.SUPERVISOR_COMMS.send(
        EmitAssetEvent(
            name=API_TARGET.name, idempotency_key=f"forge-comms-{context['run_id']}", callback_source=forged
        )
    )
    outcome["comms"] = {
        "type": type(resp).__name__,
        **({"source": resp.source.model_dump(mode="json")} if hasattr(resp, "source") else {}),
        **({"status_code": resp.status_code} if hasattr(resp, "status_code") else {}),
    }
    # A plain in-process Execution API built in the child (a raw POST: no client retries).
    import importlib

    from airflow.api_fastapi.execution_api.app import InProcessExecutionAPI

    transport = InProcessExecutionAPI().transport
    # A client of the transport's own HTTP library: httpx on 3.3, httpx2 on 3.4.
    http = importlib.import_module(type(transport).__module__.partition(".")[0])
    with http.Client(transport=transport, base_url="http://in-process.invalid./") as client:
        resp = client.post(
            "asset-events",
            json={
                "name": API_TARGET.name,
                "idempotency_key": f"forge-api-{context['run_id']}",
                "source": forged.model_dump(),
            },
            headers={"Airflow-API-Version": "2026-11-30"},
        )
    body = resp.json() if resp.headers.get("content-type") == "application/json" else {}
    detail = body.get("detail") if isinstance(body, dict) else None
    outcome["in_process_api"] = {
        "status_code": resp.status_code,
        "reason": detail.get("reason") if isinstance(detail, dict) else None,
    }
    # Control: the callback's own source is accepted.
    outcome["own"] = CB_SIGNAL.emit(
        idempotency_key=f"{context['run_id']}-forge-own", extra={"kind": "forge_own"}
    ).id
    with open(os.path.join(os.environ["EMIT_TEST_OUT"], f"forge-{context['run_id']}.json"), "w") as fh:
        json.dump(outcome, fh)


with DAG("emit_test_forge", schedule=None, on_success_callback=_forge):

    @task
    def nothing():
        return "ok"

    nothing()
    _declare("declares_signal", CB_SIGNAL)


with DAG("emit_test_trigger", schedule=None):
    from emit_test_trigger import EmitFromTriggerOperator

    EmitFromTriggerOperator(task_id="deferred", asset_name=API_TARGET.name)


with DAG("emit_test_cleanup", schedule=OPS_SIGNAL):

    @task
    def cleanup(triggering_asset_events=None):
        return "cleaned"

    cleanup()


with DAG("emit_test_sdk_errors", schedule=None):
    # Its success publishes API_TARGET as an outlet too (an event with an empty extra).
    @task(outlets=[API_TARGET])
    def bad_inputs():
        """Each bad call must raise AssetEmitError; returns the reasons, and one good async emit."""
        import asyncio

        attempts = {
            "unknown": lambda: Asset("emit_test_never_declared").emit(),
            "naive_date": lambda: API_TARGET.emit(partition_key="k", partition_date=datetime(2026, 1, 1)),
            "date_without_key": lambda: API_TARGET.emit(
                partition_date=datetime(2026, 1, 1, tzinfo=timezone.utc)
            ),
            "non_json": lambda: API_TARGET.emit(extra={"obj": object()}),
            "long_key": lambda: API_TARGET.emit(partition_key="k" * 251),
            "too_large": lambda: API_TARGET.emit(extra={"blob": "x" * 5000}),
            # Claimed beforehand by emit_test_seed_other (test_bad_input_through_the_sdk).
            "foreign_key": lambda: API_TARGET.emit(idempotency_key="sdk-foreign-key"),
        }
        reasons = {}
        for name, call in attempts.items():
            try:
                call()
                reasons[name] = "no error"
            except AssetEmitError as err:
                reasons[name] = err.reason
                reasons[f"{name}_message"] = str(err)
                reasons[f"{name}_status"] = err.status_code
        receipt = asyncio.run(
            Asset.ref(uri=API_TARGET.uri).aemit(idempotency_key="sdk-async", extra={"a": 1})
        )
        reasons["async_receipt"] = {"id": receipt.id, "deduplicated": receipt.deduplicated}
        return reasons

    bad_inputs()


with DAG("emit_test_dag_test", schedule=None) as dag_test_dag:
    # Run with dag.test() (in-process supervisor and Execution API) by test_emit_e2e.py.

    @task(outlets=[API_TARGET])
    def emit_in_dag_test():
        receipt = API_TARGET.emit(idempotency_key=os.environ.get("EMIT_TEST_DAG_TEST_KEY", "dag-test"))
        return {"id": receipt.id, "source_task_id": receipt.source_task_id}

    emit_in_dag_test()
