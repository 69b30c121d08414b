"""
Fast in-process checks of the emission scope and of the Dag processor's source vouching.

The end-to-end tests cover a Dag callback in the Dag processor; these cover task callbacks that
the scheduler hands to the Dag processor (heartbeat timeout, killed externally) and forged sources.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest


def _requests():
    from airflow.api_fastapi.execution_api.datamodels.taskinstance import TaskInstance
    from airflow.callbacks.callback_requests import DagCallbackRequest, TaskCallbackRequest

    ti = TaskInstance(
        id=uuid.uuid4(),
        task_id="load",
        dag_id="etl",
        run_id="run_1",
        try_number=2,
        dag_version_id=uuid.uuid4(),
        map_index=3,
    )
    return [
        TaskCallbackRequest(filepath="etl.py", bundle_name="b", bundle_version=None, ti=ti),
        DagCallbackRequest(filepath="etl.py", bundle_name="b", bundle_version=None, dag_id="etl", run_id="run_9"),
    ]


def test_dag_processor_vouches_only_for_its_own_callback_requests():
    from airflow.dag_processing.processor import DagFileProcessorProcess, _callback_emission_sources
    from airflow.sdk.api.datamodels._generated import AssetEventEmitSource

    proc = SimpleNamespace(callback_sources=_callback_emission_sources(_requests()))
    may_emit = DagFileProcessorProcess._may_emit_for

    task_source = AssetEventEmitSource(dag_id="etl", run_id="run_1", task_id="load", map_index=3)
    dag_source = AssetEventEmitSource(dag_id="etl", run_id="run_9")
    assert may_emit(proc, task_source)
    assert may_emit(proc, dag_source)
    # Forged: another run, another task, another map index, or no source at all (parse time).
    assert not may_emit(proc, AssetEventEmitSource(dag_id="etl", run_id="run_2"))
    assert not may_emit(proc, AssetEventEmitSource(dag_id="etl", run_id="run_1", task_id="other", map_index=3))
    assert not may_emit(proc, AssetEventEmitSource(dag_id="etl", run_id="run_1", task_id="load", map_index=4))
    assert not may_emit(proc, AssetEventEmitSource(dag_id="other", run_id="run_9"))
    assert not may_emit(proc, None)
    assert not may_emit(SimpleNamespace(callback_sources=[]), dag_source)


def test_scope_decides_whether_and_as_whom_to_emit():
    from airflow.sdk.exceptions import AssetEmitError
    from airflow.sdk.execution_time import asset_emit

    with pytest.raises(AssetEmitError) as err:
        asset_emit._build_message(
            name="a", uri=None, extra=None, partition_key=None, partition_date=None, idempotency_key=None
        )
    assert err.value.reason == "not_at_runtime"

    with asset_emit.asset_emission_scope(dag_id="etl", run_id="run_1", task_id="load", map_index=3):
        msg = asset_emit._build_message(
            name="a", uri=None, extra={"k": 1}, partition_key="p", partition_date=None, idempotency_key=None
        )
    assert msg.callback_source.model_dump() == {
        "dag_id": "etl",
        "run_id": "run_1",
        "task_id": "load",
        "map_index": 3,
    }
    assert msg.idempotency_key.startswith("auto-")

    with asset_emit.task_emission_scope():
        first = asset_emit._build_message(
            name="a", uri=None, extra=None, partition_key=None, partition_date=None, idempotency_key=None
        )
        second = asset_emit._build_message(
            name="a", uri=None, extra=None, partition_key=None, partition_date=None, idempotency_key=None
        )
    assert first.callback_source is None
    assert first.idempotency_key != second.idempotency_key  # one generated key per call
    with pytest.raises(AssetEmitError):  # the scope is closed again
        asset_emit._build_message(
            name="a", uri=None, extra=None, partition_key=None, partition_date=None, idempotency_key=None
        )
