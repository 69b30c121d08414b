"""
Mixed versions during a rolling deploy (docs/operations.md, "Rollout order and mixed versions").

- A patched api-server and scheduler with an **unpatched** Celery worker (3.3.2 with the unpatched
  celery provider, its own venv): tasks succeed, fail and retry as on vanilla Airflow; the older
  worker sends no cause, so the server records ``unknown`` for its failed tries.
- A **patched** worker (the LocalExecutor of a patched scheduler) against an **unpatched**
  api-server, started before the patched ``airflow db migrate`` as in a deploy that upgraded the
  workers before the api-server: the older server rejects the AIP-97 fields of a failed try; the
  worker reports the try again in the older format, so the failure is retried and ends as on vanilla
  Airflow, long before the heartbeat timeout, and the worker's log says that the api-server is older
  than the worker and must be upgraded first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import (
    MIXED_DAGS_FILE,
    PATCHED_VENV,
    companion,
    ops_stack,
    run_dags,
)

import harness
import lines

MIXED_DAGS = ("mixed_ok", "mixed_fail")
#: Far beyond the tests' own waits: a try that ends within them was not left to the heartbeat timeout.
HEARTBEAT_TIMEOUT = "600"


def _tries(url: str) -> dict[str, list[tuple[int, str, str | None]]]:
    """Each mixed task's tries: (try_number, state, failure_cause), past ones first."""
    tries: dict[str, list[tuple[int, str, str | None]]] = {}
    for source in (lines.PAST_TRIES, lines.LIVE_TRIES):
        for r in harness.query(url, f"SELECT task_id, try_number, state, failure_cause FROM {source} ORDER BY try_number"):
            tries.setdefault(r["task_id"], []).append((r["try_number"], r["state"], r["failure_cause"]))
    return tries


@pytest.mark.e2e
@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_unpatched_celery_worker_with_patched_api_server_and_scheduler(tmp_path: Path) -> None:
    vanilla_full = harness.unpatched_venv(providers=True)
    settings = {
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "1",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": HEARTBEAT_TIMEOUT,
    }
    # The patched api-server, Dag processor and scheduler (CeleryExecutor, the stack's own redis-server)
    # on a copy of the patched template; the unpatched worker in the same home, with the same settings.
    with (
        ops_stack(
            "t_ops_mixed_celery", PATCHED_VENV, tmp_path / "home", (MIXED_DAGS_FILE,),
            config=settings, executor="CeleryExecutor",
        ) as stack,
        companion(stack, vanilla_full) as worker_env,
    ):
        worker_env.start("celery", "worker", "--concurrency", "1", name="celery-worker-3.3.2")
        run_dags(stack, MIXED_DAGS, timeout=240, logs=("scheduler", "celery-worker-3.3.2"))
        runs = {r["dag_id"]: r["state"] for r in stack.query("SELECT dag_id, state FROM dag_run")}
        tries = _tries(stack.db_url)
    assert runs == {"mixed_ok": "success", "mixed_fail": "failed"}
    assert tries["ok"] == [(1, "success", None)]
    # Retried once as on vanilla Airflow; the older worker sent no cause: recorded as unknown.
    assert tries["fails"] == [(1, "failed", "unknown"), (2, "failed", "unknown")], tries


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_patched_worker_against_an_older_api_server(tmp_path: Path, vanilla_venv: Path) -> None:
    settings = {"AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": HEARTBEAT_TIMEOUT}
    # The older api-server is up on its own schema (a copy of the vanilla build's SQLite template); then
    # the patched build migrates and its scheduler (with the LocalExecutor's patched workers) starts.
    with (
        ops_stack(
            "t_ops_older_api", vanilla_venv, tmp_path / "home", (MIXED_DAGS_FILE,),
            backend="sqlite", config=settings, components=("api-server",),
        ) as api_stack,
        companion(api_stack, PATCHED_VENV) as env,
    ):
        env.airflow("db", "migrate", timeout=600)
        env.start("dag-processor")
        env.start("scheduler")
        run_dags(api_stack, MIXED_DAGS, timeout=180, cli=env, logs=("api-server", "dag-processor", "scheduler"))
    url = api_stack.db_url
    runs = {r["dag_id"]: r["state"] for r in harness.query(url, "SELECT dag_id, state FROM dag_run")}
    assert runs == {"mixed_ok": "success", "mixed_fail": "failed"}
    tries = _tries(url)
    assert tries["ok"] == [(1, "success", None)]
    # The worker's own reports were accepted in the older format: retried once, then failed, and the
    # older server recorded no cause (the LocalExecutor's own report found the try already ended).
    assert [(n, state) for n, state, _ in tries["fails"]] == [(1, "failed"), (2, "failed")], tries
    assert all(cause is None for _, _, cause in tries["fails"]), tries
    # The LocalExecutor's workers log to the scheduler's output: one warning per failed try.
    worker_log = env.log_text("scheduler")
    warnings = [line for line in worker_log.splitlines() if "it runs an older Airflow than this worker" in line]
    assert len(warnings) == 2, worker_log[-5000:]
    assert all("upgrade the api-server before the workers" in line for line in warnings)
    assert {"state=up_for_retry", "state=failed"} == {
        word for line in warnings for word in line.split() if word.startswith("state=")
    }
