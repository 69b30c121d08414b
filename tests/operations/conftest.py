"""
Shared code of the operations tests (docs/operations.md): the one stack they start, and its queries.

``airflow_stack()`` starts api-server, dag-processor and scheduler (LocalExecutor, or Celery) of a
venv over a database with ``tests/harness.py``; ``run_dags()`` triggers Dags and waits for their runs
to finish; ``build_patched_state()`` runs ``dags/ops_state.py`` on the patched build (this session's
venv) so that the database holds every kind of state the patch set adds, optionally sending its
StatsD lines to a receiver.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
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
#: This line's Redis database for the Celery stacks of tests/operations (tests/providers uses 12-15).
REDIS_DB = {"3.3": 10, "3.4": 11}[lines.LINE]
STATE_DAGS = ("ops_infra", "ops_cap", "ops_app", "ops_timeout", "ops_emit")

#: The migration head of the unpatched release of each line: where the rollback downgrades to.
VANILLA_HEAD = {"3.3": "d2f4e1b3c5a7", "3.4": "9cffe90fa0c0"}
#: The head of each line's full series (aip-122's migration).
PATCHED_HEAD = {"3.3": "704a18c1acc7", "3.4": "9f4bf13695f5"}
#: The rollback command of each line, as docs/operations.md gives it (``-y`` added by the tests).
ROLLBACK_COMMAND = {
    "3.3": ("db", "downgrade", "--to-version", "3.3.2"),
    "3.4": ("db", "downgrade", "--to-revision", VANILLA_HEAD["3.4"]),
}


def rows(url: str, sql: str) -> list[dict[str, Any]]:
    """Run one query on the database at ``url`` and return its rows as dicts."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.text(sql)).mappings()]
    finally:
        engine.dispose()


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status == 200


def stack_settings(port: int, **overrides: str) -> dict[str, str]:
    """The Airflow settings of an operations stack whose api-server listens on ``port``."""
    settings = {
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API_AUTH__JWT_SECRET": "ops-" + uuid.uuid4().hex,
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "300",
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
    }
    settings.update(overrides)
    return settings


@contextlib.contextmanager
def airflow_stack(
    venv: Path,
    home: Path,
    url: str,
    dag_files: tuple[Path, ...],
    *,
    settings: dict[str, str] | None = None,
    components: tuple[str, ...] = ("api-server", "dag-processor", "scheduler"),
    migrate: bool = True,
) -> Iterator[harness.AirflowEnv]:
    """Start ``components`` of ``venv`` over the database ``url`` with ``dag_files``; stop them after."""
    port = harness.free_port()
    env_settings = stack_settings(port, **(settings or {}))
    with harness.AirflowEnv(venv, home, db_url=url, extra_env=env_settings) as env:
        for dag_file in dag_files:
            shutil.copy(dag_file, env.dags_folder)
        if migrate:
            env.airflow("db", "migrate", timeout=600)
        for component in components:
            env.start(component)
            if component == "api-server":
                harness.wait_for(
                    lambda: _http_ok(f"http://127.0.0.1:{port}/execution/health"),
                    timeout=180,
                    what=f"{venv.name} api-server",
                )
        try:
            yield env
        except BaseException:
            for name in list(env.procs):
                print(f"==== {name}\n", env.log_text(name)[-5000:])
            raise


def companion(env: harness.AirflowEnv, venv: Path) -> harness.AirflowEnv:
    """An environment of another build (``venv``) in the same home, with the same settings as ``env``."""
    settings = {k: v for k, v in env.env.items() if k.startswith("AIRFLOW__")}
    return harness.AirflowEnv(venv, env.home, db_url=env.db_url, extra_env=settings)


def run_dags(env: harness.AirflowEnv, url: str, dag_ids: tuple[str, ...], *, timeout: float = 300) -> None:
    """Trigger each Dag once it is parsed, then wait until every run of them has finished."""
    for dag_id in dag_ids:
        harness.wait_for(
            lambda d=dag_id: rows(url, f"SELECT 1 FROM dag WHERE dag_id = '{d}' AND is_stale IS FALSE"),
            timeout=180,
            what=f"{dag_id} parsed",
        )
        env.airflow("dags", "trigger", dag_id, timeout=120)
    names = ", ".join(f"'{d}'" for d in dag_ids)

    def finished() -> bool:
        runs = rows(url, f"SELECT state FROM dag_run WHERE dag_id IN ({names})")
        return len(runs) >= len(dag_ids) and all(r["state"] in ("success", "failed") for r in runs)

    try:
        harness.wait_for(finished, timeout=timeout, interval=1, what=f"the runs of {names} finished")
    except TimeoutError:
        print(rows(url, "SELECT dag_id, task_id, state, try_number FROM task_instance"))
        raise


def build_patched_state(
    url: str,
    home: Path,
    *,
    statsd_port: int | None = None,
    while_up: Callable[[harness.AirflowEnv], Any] | None = None,
) -> Any:
    """
    Run ``dags/ops_state.py`` on the patched build over ``url`` until every run has finished.

    ``while_up(env)`` is then called while the stack still runs; its result is returned.
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
    with airflow_stack(PATCHED_VENV, home, url, (STATE_DAGS_FILE,), settings=settings) as env:
        run_dags(env, url, STATE_DAGS, timeout=300)
        # The scheduler logs and counts a retry decision after its commit: give the last one a moment.
        harness.wait_for(
            lambda: "cap_reached" in env.log_text("scheduler"), timeout=30, what="the cap_reached decision logged"
        )
        return while_up(env) if while_up else None


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
    sys.path.insert(0, str(TESTS / "aip97_core"))
    from aip97_statsd_receiver import StatsdReceiver

    base = tmp_path_factory.mktemp("patched-state")
    url = f"sqlite:///{base / 'airflow.db'}"
    with StatsdReceiver() as receiver:
        rest_tries = build_patched_state(url, base / "home", statsd_port=receiver.port, while_up=_rest_tries)
        statsd_lines = list(receiver.lines)
    return {"db": base / "airflow.db", "statsd_lines": statsd_lines, "rest_tries": rest_tries}


def docs_block(marker: str) -> str:
    """The fenced code block that follows ``<!-- tested: marker -->`` in docs/operations.md."""
    text = (REPO / "docs" / "operations.md").read_text()
    found = re.search(rf"<!-- tested: {re.escape(marker)} -->\n```\w*\n(.*?)\n```", text, re.DOTALL)
    assert found, f"no block marked {marker!r} in docs/operations.md"
    return found.group(1)


def _rest_tries(env: harness.AirflowEnv) -> str:
    """Run the guide's REST example (docs/operations.md, "Reading the cause") for ops_cap.lose_always."""
    run_id = rows(env.db_url, "SELECT run_id FROM dag_run WHERE dag_id = 'ops_cap'")[0]["run_id"]
    shell_env = {
        **os.environ,
        "AIRFLOW_URL": f"http://127.0.0.1:{env.env['AIRFLOW__API__PORT']}",
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
