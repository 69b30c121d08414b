"""
Fast in-process checks of the emission scope.

The Dag processor's source vouching is tested end to end (test_emit_e2e.py: a Dag callback in the
real Dag processor forging another Dag's source).
"""

from __future__ import annotations

import pytest

from lines import DEFAULT_LINE, LINE


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
    expected_source = {"dag_id": "etl", "run_id": "run_1", "task_id": "load", "map_index": 3}
    if LINE != DEFAULT_LINE:
        # 3.4: a task callback's source may name its exact attempt (AIP doc section 9); the Dag
        # processor passes TaskCallbackRequest.ti.id, this scope named none.
        expected_source["task_instance_id"] = None
    assert msg.callback_source.model_dump() == expected_source
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


def test_refused_process_gets_a_clear_error_even_inside_a_scope():
    from airflow.sdk.exceptions import AssetEmitError
    from airflow.sdk.execution_time import asset_emit

    with asset_emit.asset_emission_refused_in_triggers():
        with asset_emit.task_emission_scope(), pytest.raises(AssetEmitError) as err:
            asset_emit._build_message(
                name="a", uri=None, extra=None, partition_key=None, partition_date=None, idempotency_key=None
            )
        assert err.value.reason == "not_in_trigger"
    # The refusal belongs to the triggerer's run, not to the process: it ends with its block.
    with asset_emit.task_emission_scope():
        asset_emit._build_message(
            name="a", uri=None, extra=None, partition_key=None, partition_date=None, idempotency_key=None
        )
