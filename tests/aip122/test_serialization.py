"""The per-task ``max_infra_retries`` operator argument: validation and the serialized Dag."""

from __future__ import annotations

from datetime import datetime

import pytest

from airflow.sdk import DAG, BaseOperator


class Noop(BaseOperator):
    def execute(self, context):
        return None


def _roundtrip(dag):
    from airflow.serialization.serialized_objects import DagSerialization

    data = DagSerialization.to_dict(dag)
    DagSerialization.validate_schema(data)
    return data, DagSerialization.from_dict(data)


def test_max_infra_retries_is_serialized_and_read_by_the_scheduler():
    with DAG("aip122_ser", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        Noop(task_id="default")
        Noop(task_id="opt_out", max_infra_retries=0)
        Noop(task_id="three", max_infra_retries=3)
        Noop.partial(task_id="mapped", max_infra_retries=2).expand(doc=["a", "b"])
        Noop.partial(task_id="mapped_default").expand(doc=["a"])
    data, sdag = _roundtrip(dag)
    tasks = {t["__var"]["task_id"]: t["__var"] for t in data["dag"]["tasks"]}
    # None (use the config) is the default and is left out of the JSON, like other optional fields.
    assert "max_infra_retries" not in tasks["default"]
    assert tasks["opt_out"]["max_infra_retries"] == 0
    assert tasks["three"]["max_infra_retries"] == 3
    assert tasks["mapped"]["partial_kwargs"]["max_infra_retries"] == 2

    assert sdag.get_task("default").max_infra_retries is None
    assert sdag.get_task("opt_out").max_infra_retries == 0
    assert sdag.get_task("three").max_infra_retries == 3
    assert sdag.get_task("mapped").max_infra_retries == 2
    assert sdag.get_task("mapped_default").max_infra_retries is None


def test_max_infra_retries_from_default_args():
    with DAG(
        "aip122_ser_da", schedule=None, start_date=datetime(2024, 1, 1), default_args={"max_infra_retries": 0}
    ) as dag:
        Noop(task_id="t")
    _, sdag = _roundtrip(dag)
    assert sdag.get_task("t").max_infra_retries == 0


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_invalid_max_infra_retries_is_rejected(bad):
    with pytest.raises((ValueError, TypeError), match="max_infra_retries"):
        Noop(task_id="bad", max_infra_retries=bad)


def test_serialized_field_lists_agree():
    from airflow.serialization.definitions.baseoperator import SerializedBaseOperator

    assert "max_infra_retries" in BaseOperator.get_serialized_fields()
    assert "max_infra_retries" in SerializedBaseOperator.get_serialized_fields()
