"""
Shared code of the operations tests (docs/operations.md): the one stack they start, and its queries.

``ops_stack()`` is a ``tests/harness.py`` ``Stack`` (api-server, dag-processor and scheduler, with the
LocalExecutor or Celery on a private ``redis-server``) of a venv, on a database the test made or a copy
of the venv's migrated template; ``companion()`` runs another build in the same home;
``run_dags()`` triggers Dags and waits for their runs to finish; ``build_patched_state()`` runs
``dags/ops_state.py`` on the patched build (this session's venv) so that the database holds every
kind of state the patch set adds, optionally sending its StatsD lines to a receiver.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

import harness  # noqa: E402  (after the sys.path insert above)
import lines  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PATCHED_VENV = Path(sys.prefix)
STATE_DAGS_FILE = HERE / "dags" / "ops_state.py"
VANILLA_DAGS_FILE = HERE / "dags_vanilla" / "ops_after_rollback.py"
MIXED_DAGS_FILE = HERE / "dags_mixed" / "ops_mixed.py"
STATE_DAGS = ("ops_infra", "ops_cap", "ops_app", "ops_timeout", "ops_emit")

#: The migration head of the unpatched release of each line: where the rollback downgrades to.
VANILLA_HEAD = {"3.3": "d2f4e1b3c5a7", "3.4": "9cffe90fa0c0"}
#: The head of each line's full series (aip-122's migration).
PATCHED_HEAD = {"3.3": "9c3e5a7f1d24", "3.4": "4d7a1c9e3f58"}
#: The rollback command of each line, as docs/operations.md gives it (``-y`` added by the tests).
ROLLBACK_COMMAND = {
    "3.3": ("db", "downgrade", "--to-version", "3.3.2"),
    "3.4": ("db", "downgrade", "--to-revision", VANILLA_HEAD["3.4"]),
}


#: The settings of every operations stack, on top of the harness's (``tests/harness.py`` ``Stack``).
SETTINGS = {
    "AIRFLOW__CORE__PARALLELISM": "4",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "300",
}


def ops_stack(
    name: str,
    venv: Path,
    home: Path,
    dag_files: tuple[Path, ...],
    *,
    db_url: str | None = None,
    backend: str = "postgresql",
    config: dict[str, str] | None = None,
    executor: str = "LocalExecutor",
    components: tuple[str, ...] = harness.DEFAULT_COMPONENTS,
) -> harness.Stack:
    """A stack of ``venv`` with ``dag_files``: on ``db_url`` (a database the test made), or on a copy of the venv's template."""
    return harness.Stack(
        name,
        home,
        venv=venv,
        db_url=db_url,
        backend=backend,
        executor=executor,
        components=components,
        dags=dag_files,
        config={**SETTINGS, **(config or {})},
    )


def companion(stack: harness.Stack, venv: Path) -> harness.AirflowEnv:
    """An environment of another build (``venv``) in the stack's home, with the stack's settings."""
    settings = {k: v for k, v in stack.env.env.items() if k.startswith("AIRFLOW__")}
    return harness.AirflowEnv(venv, stack.home, db_url=stack.db_url, extra_env=settings)


def run_dags(
    stack: harness.Stack,
    dag_ids: tuple[str, ...],
    *,
    timeout: float = 300,
    cli: harness.AirflowEnv | None = None,
    logs: tuple[str, ...] = (),
) -> None:
    """Trigger each Dag once it is parsed (``airflow dags trigger`` of ``cli``, another build; by default
    ``stack.trigger``: the REST API of the stack's api-server), then wait until every run of them has
    finished; on a timeout, print the tries and the ``logs``."""
    for dag_id in dag_ids:
        stack.wait_for(
            lambda d=dag_id: stack.query("SELECT 1 FROM dag WHERE dag_id = %(d)s AND is_stale IS FALSE", d=d),
            timeout=180,
            what=f"{dag_id} parsed",
            logs=logs,
        )
        if cli is None:
            stack.trigger(dag_id)
        else:
            cli.airflow("dags", "trigger", dag_id, timeout=120)

    def finished() -> bool:
        runs = [r for r in stack.query("SELECT dag_id, state FROM dag_run") if r["dag_id"] in dag_ids]
        return len(runs) >= len(dag_ids) and all(r["state"] in ("success", "failed") for r in runs)

    try:
        stack.wait_for(finished, timeout=timeout, interval=1, what=f"the runs of {', '.join(dag_ids)} finished", logs=logs)
    except TimeoutError:
        print(stack.query("SELECT dag_id, task_id, state, try_number FROM task_instance"))
        raise


def build_patched_state(
    url: str,
    home: Path,
    *,
    statsd_port: int | None = None,
    while_up: Callable[[harness.Stack], Any] | None = None,
) -> Any:
    """
    Run ``dags/ops_state.py`` on the patched build (this session's venv) over ``url``, a database it
    migrated, until every run has finished.

    ``while_up(stack)`` is then called while the stack still runs; its result is returned.
    """
    settings = {"AIRFLOW__CORE__MAX_INFRA_RETRIES": "1", "AIRFLOW__CORE__INFRA_RETRY_DELAY": "1"}
    if statsd_port is not None:
        settings.update(
            {
                "AIRFLOW__METRICS__STATSD_ON": "True",
                "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__STATSD_PORT": str(statsd_port),
                "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
                "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
            }
        )
    with ops_stack("t_ops_state", PATCHED_VENV, home, (STATE_DAGS_FILE,), db_url=url, config=settings) as stack:
        run_dags(stack, STATE_DAGS, timeout=300)
        # The scheduler logs and counts a retry decision after its commit: give the last one a moment.
        stack.wait_for(
            lambda: "cap_reached" in stack.log_text("scheduler"), timeout=30, what="the cap_reached decision logged"
        )
        return while_up(stack) if while_up else None


@pytest.fixture(scope="session")
def vanilla_venv() -> Path:
    """The unpatched release of this session's line (3.3.2 or 3.4.0b2), from the pinned wheels."""
    return harness.unpatched_venv(line=lines.LINE)


@pytest.fixture(scope="session")
def patched_state_sqlite(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """
    A SQLite database the patched build filled with ``dags/ops_state.py``, and the StatsD lines its
    scheduler sent (tagged: ``statsd_influxdb_enabled``). Built once per session; a test that changes
    the database works on a copy (``copy_of()``).
    """
    base = tmp_path_factory.mktemp("patched-state")
    url = harness.migrated_sqlite(PATCHED_VENV, base)
    with harness.StatsdReceiver() as receiver:
        rest_tries = build_patched_state(url, base / "home", statsd_port=receiver.port, while_up=_rest_tries)
        statsd_lines = list(receiver.lines)
    _checkpoint(base / "airflow.db")
    return {"db": base / "airflow.db", "statsd_lines": statsd_lines, "rest_tries": rest_tries}


def _checkpoint(db: Path) -> None:
    """
    Write everything the stack committed into the database file itself.

    Airflow opens SQLite in WAL mode: until a checkpoint, commits live in ``airflow.db-wal``, and a
    component stopped without closing its last connection leaves them there. The tests copy
    ``airflow.db`` alone, so a copy taken before a checkpoint held the migrated schema and no rows
    (``test_rollback_to_vanilla[sqlite]`` failed so once, on 3.4: no failure cause at all).
    """
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def docs_block(marker: str) -> str:
    """The fenced code block that follows ``<!-- tested: marker -->`` in docs/operations.md."""
    text = (REPO / "docs" / "operations.md").read_text()
    found = re.search(rf"<!-- tested: {re.escape(marker)} -->\n```\w*\n(.*?)\n```", text, re.DOTALL)
    assert found, f"no block marked {marker!r} in docs/operations.md"
    return found.group(1)


def _rest_tries(stack: harness.Stack) -> str:
    """Run the guide's REST example (docs/operations.md, "Reading the cause") for ops_cap.lose_always."""
    run_id = stack.query("SELECT run_id FROM dag_run WHERE dag_id = 'ops_cap'")[0]["run_id"]
    shell_env = {
        **os.environ,
        "AIRFLOW_URL": stack.api_url,
        "DAG_ID": "ops_cap",
        "RUN_ID": run_id,
        "TASK_ID": "lose_always",
    }
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", docs_block("rest-tries")],
        env=shell_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
