"""The AIP-97 demo Dag (examples/dags/aip97_failure_causes.py) ends with the causes its docstring promises."""

from __future__ import annotations

import lines
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

DAG = "aip97_failure_causes"


def test_demo_dag_causes(stack):
    stack.trigger(DAG)
    raises = stack.wait_ti(DAG, "raises", {"failed", "success"}, timeout=120)
    assert (raises["failure_cause"], raises["failure_reason"]) == (
        "application",
        "ValueError: the input file has no header row",
    )
    times_out = stack.wait_ti(DAG, "times_out", {"failed", "success"}, timeout=120)
    assert times_out["failure_cause"] == "timeout"
    # The worker dies on try 1 (infra, archived), try 2 succeeds and starts with a clean row.
    lost = stack.wait_ti(DAG, "worker_lost", {"failed", "success"}, timeout=120)
    assert lost["state"] == "success" and lost["try_number"] == 2
    assert lost["failure_cause"] is None
    (first_try,) = stack.query(
        f"SELECT try_number, failure_cause, failure_reason FROM {lines.PAST_TRIES} "
        "WHERE dag_id = %(d)s AND task_id = 'worker_lost'",
        d=DAG,
    )
    assert first_try["try_number"] == 1 and first_try["failure_cause"] == "infra"
    assert "killed by SIGKILL" in first_try["failure_reason"]
