"""
tests/retry_rules: end-to-end tests of retry rules on failure causes, infra-retry backoff and the storm guard.

Each module runs on one ``tests/harness.py`` :class:`~harness.Stack` of its own (api-server, Dag
processor and, unless the module starts its own, a scheduler; PostgreSQL copied from the migrated
template): the two modules need different settings for every component (the executor, the
infrastructure-retry budget, StatsD), so they share none. ``retry_rules_stack`` makes a module's
stack with what both have: this directory's listener plugin, ``pythonpath/`` (the storm executor)
and ``$RR_OUT`` (``stack.out``), where the listener and the executor write their records.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

import harness  # noqa: E402


@pytest.fixture(scope="module")
def retry_rules_stack(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., harness.Stack]:
    """Make a stack (not started) over ``dags/<dag_files>`` with this directory's plugin and executor path."""

    def make(
        *,
        dag_files: Iterable[str],
        config: dict[str, str],
        executor: str = "LocalExecutor",
        components: Iterable[str] = harness.DEFAULT_COMPONENTS,
    ) -> harness.Stack:
        return harness.Stack(
            "t_retry_rules",
            tmp_path_factory.mktemp("retry_rules"),
            components=components,
            executor=executor,
            dags=[HERE / "dags" / name for name in dag_files],
            plugins=[HERE / "plugins"],
            out_var="RR_OUT",
            config={
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                "PYTHONPATH": str(HERE / "pythonpath"),
                **config,
            },
        )

    return make
