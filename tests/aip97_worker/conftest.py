"""
Fixtures for the AIP-97 worker-side tests: one real Airflow stack for the whole session.

``tests/harness.py``'s ``Stack``: a private PostgreSQL database (a copy of the migrated template), an
``airflow api-server`` (Execution API), an ``airflow dag-processor`` and an ``airflow scheduler``
with the LocalExecutor, in their own process groups with a private AIRFLOW_HOME. The heartbeat
timeout is 300 s: a failure the heartbeat path ended would say so in its reason, and every test
here checks the reason of the path under test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Stack

HERE = Path(__file__).parent

DEMO_DAG = HERE.parents[1] / "examples" / "dags" / "aip97_failure_causes.py"


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with Stack(
        "t_aip97w",
        tmp_path_factory.mktemp("aip97w"),
        dags=[HERE / "dags", DEMO_DAG],
        plugins=[HERE / "plugins"],
        out_var="AIP97W_OUT",
        config={
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "300",
        },
    ) as s:
        s.trigger("aip97w_causes")
        yield s
