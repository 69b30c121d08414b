"""
End to end: tasks that lose their LocalExecutor worker, with real Airflow processes on PostgreSQL.

One private database, ``api-server`` (Execution API) and ``dag-processor`` serve both tests; each
test starts its own scheduler(s) with its own ``[core] max_infra_retries``:

* ``test_default_config_fails_like_upstream``: one scheduler, default configuration -- the task
  whose worker is killed fails with ``retries=0``, no infrastructure retry, counter 0;
* ``test_infra_retries_end_to_end``: a scheduler with ``max_infra_retries=1`` and
  ``infra_retry_delay=1`` while tasks kill their workers over and over. Every count must be exact:
  per task instance, in the history, and in the number of ``infra_retry=granted`` decisions logged.

Two schedulers racing to decide the *same* failure are tested in ``test_atomic_grants.py`` (two
schedulers each running their own task instances, as this test once did, cannot catch a failure
granted twice: each only decides the failures of its own task instances).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from lines import LIVE_TRIES, PAST_TRIES  # noqa: E402
from harness import AirflowEnv, free_port, pg_available, pg_database, wait_for  # noqa: E402

VENV = Path(sys.executable).parent.parent
FINISHED = {"success", "failed"}


def _http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status == 200


class Stack:
    def __init__(self, base: AirflowEnv, db_url: str, out: Path, common_env: dict[str, str]) -> None:
        self.base = base
        self.db_url = db_url
        self.out = out
        self.common_env = common_env

    def query(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        import psycopg2
        import psycopg2.extras

        conn = psycopg2.connect(self.db_url.replace("postgresql+psycopg2://", "postgresql://"))
        try:
            with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
                cur.execute(sql, params)
                return [dict(r) for r in cur.fetchall()] if cur.description else []
        finally:
            conn.close()

    def tis(self, dag_id: str) -> dict[tuple[str, int], dict[str, Any]]:
        rows = self.query(
            "SELECT task_id, map_index, state, try_number, max_tries, infra_retry_count, failure_cause "
            f"FROM {LIVE_TRIES} WHERE dag_id = %(d)s",
            d=dag_id,
        )
        return {(r["task_id"], r["map_index"]): r for r in rows}

    def history(self, dag_id: str) -> list[dict[str, Any]]:
        return self.query(
            "SELECT task_id, map_index, try_number, state, failure_cause, infra_retry_count "
            f"FROM {PAST_TRIES} WHERE dag_id = %(d)s ORDER BY task_id, map_index, try_number",
            d=dag_id,
        )

    def jsonl(self, name: str) -> list[dict[str, Any]]:
        path = self.out / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def schedulers(self, count: int, extra_env: dict[str, str]) -> AirflowEnv:
        env = AirflowEnv(
            VENV,
            self.base.home,
            db_url=self.db_url,
            dags_folder=self.base.dags_folder,
            extra_env={**self.common_env, **extra_env},
        )
        for i in range(count):
            env.start("scheduler", name=f"{extra_env.get('AIP122_NAME', 'scheduler')}-{i}")
        return env

    def trigger(self, dag_id: str) -> None:
        wait_for(
            lambda: self.query("SELECT 1 FROM dag WHERE dag_id = %(d)s", d=dag_id),
            timeout=90,
            what=f"dag {dag_id} parsed",
        )
        self.base.airflow("dags", "trigger", dag_id, timeout=120)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if not pg_available():
        pytest.fail("PostgreSQL at 127.0.0.1:5432 is not reachable; run .ci/services.sh")
    home = tmp_path_factory.mktemp("aip122e2e")
    out = home / "out"
    out.mkdir()
    port = free_port()
    common = {
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "6",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API_AUTH__JWT_SECRET": "aip122-" + uuid.uuid4().hex,
        # Failures must be seen by the LocalExecutor, not by the (300 s) heartbeat timeout.
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "300",
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN": "0.05",
        "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX": "0.2",
        "AIP122_OUT": str(out),
    }
    with pg_database("t_aip122_e2e") as db_url:
        base = AirflowEnv(VENV, home, db_url=db_url, extra_env=common)
        shutil.copy(HERE / "dags" / "aip122_e2e_dags.py", base.dags_folder)
        shutil.copytree(HERE / "plugins", home / "plugins", dirs_exist_ok=True)
        try:
            base.airflow("db", "migrate", timeout=300)
            base.start("api-server")
            # Tasks fail with ConnectError if they start before the Execution API listens (seen on
            # a loaded machine: the default-config test then recorded unknown instead of infra).
            wait_for(
                lambda: _http_ok(f"http://127.0.0.1:{port}/execution/health"),
                timeout=180,
                what="api-server health",
            )
            base.start("dag-processor")
            yield Stack(base, db_url, out, common)
        finally:
            base.stop()


def _decision_lines(text: str) -> list[dict[str, str]]:
    """The "Infrastructure retry decision" lines: grants (info) and denials other than configured ones."""
    lines = []
    for m in re.finditer(r"Infrastructure retry decision: (.*)", text):
        lines.append(dict(re.findall(r"(\w+)=(\S+)", m.group(1))))
    return lines


def _failure_lines(text: str) -> list[dict[str, str]]:
    """The scheduler's one "Task instance failure recorded" line per failure (``infra_retry=outcome:reason``)."""
    lines = []
    for m in re.finditer(r"Task instance failure recorded: (.*)", text):
        lines.append(dict(re.findall(r"(\w+)=(\S+)", m.group(1))))
    return lines


def _wait_finished(stack: Stack, dag_id: str, expected: int, timeout: float, envs: list[AirflowEnv]):
    def done():
        tis = stack.tis(dag_id)
        return tis if len(tis) == expected and all(t["state"] in FINISHED for t in tis.values()) else None

    try:
        return wait_for(done, timeout=timeout, interval=1, what=f"{dag_id} finished")
    except TimeoutError:
        print(stack.tis(dag_id))
        for env in envs:
            for name in list(env.procs):
                print(f"==== {name}\n", env.log_text(name)[-5000:])
        raise


def _log_once(env: AirflowEnv, name: str, ready, timeout: float = 30) -> str:
    """The log of ``name`` once ``ready(text)`` holds.

    The scheduler logs a failure's outcome line after the transaction that recorded it commits (it
    reports only what was recorded), so a test that saw the state in the database waits for the line
    before it stops the scheduler, else the stop can come between the commit and the line.
    """
    return wait_for(
        lambda: (text := env.log_text(name)) and ready(text) and text,
        timeout=timeout,
        interval=0.5,
        what=f"the outcome lines in {name}'s log",
    )


@pytest.mark.e2e
# pytest-timeout counts the module stack's start (db migrate, api-server, dag-processor) in the first
# test and its stop in the last: about 90 s idle, given three times that for a loaded CI machine.
@pytest.mark.timeout(300)
def test_default_config_fails_like_upstream(stack: Stack):
    env = stack.schedulers(1, {"AIP122_NAME": "scheduler-default"})
    try:
        start = time.monotonic()
        stack.trigger("aip122_default")
        tis = _wait_finished(stack, "aip122_default", 1, 90, [env, stack.base])
        elapsed = time.monotonic() - start
        text = _log_once(env, "scheduler-default-0", _failure_lines)
    finally:
        env.stop()
    ti = tis[("kill_once", -1)]
    # retries=0 and infrastructure retries disabled: the lost worker fails the task, as in 3.3.2.
    assert ti["state"] == "failed"
    assert (ti["try_number"], ti["max_tries"], ti["infra_retry_count"]) == (1, 0, 0)
    assert ti["failure_cause"] == "infra"
    # A denial because the feature is off is no warning, and not a separate info line either: the
    # scheduler's one line for the failure carries it.
    assert _decision_lines(text) == []
    assert [(d["failure_cause"], d["infra_retry"]) for d in _failure_lines(text)] == [("infra", "denied:disabled")]
    print(f"default config: failed {elapsed:.1f}s after the trigger")


@pytest.mark.e2e
@pytest.mark.timeout(300)  # includes the module stack's stop (above)
def test_infra_retries_end_to_end(stack: Stack):
    env = stack.schedulers(
        1,
        {
            "AIP122_NAME": "scheduler-ha",
            "AIRFLOW__CORE__MAX_INFRA_RETRIES": "1",
            "AIRFLOW__CORE__INFRA_RETRY_DELAY": "1",
        },
    )
    try:
        stack.trigger("aip122_ha")
        tis = _wait_finished(stack, "aip122_ha", 8, 100, [env, stack.base])

        def outcomes_logged(text: str) -> bool:
            failures = [d for d in _failure_lines(text) if d["dag_id"] == "aip122_ha"]
            denials = [
                d for d in _decision_lines(text) if d["dag_id"] == "aip122_ha" and d["infra_retry"] == "denied"
            ]
            return any(d["task_id"] == "opt_out" for d in failures) and bool(denials)

        logs = [_log_once(env, "scheduler-ha-0", outcomes_logged)]
        alive = [p.poll() is None for p in env.procs.values()]
    finally:
        env.stop()
    assert all(alive), "a scheduler died during the test"

    def row(task_id, map_index=-1):
        r = tis[(task_id, map_index)]
        return r["state"], r["try_number"], r["max_tries"], r["infra_retry_count"]

    # retries=0, config cap 1: one lost worker, then success on the second try.
    assert row("kill_once") == ("success", 2, 1, 1)
    # The cap (max_infra_retries=2) holds under repeated kills: 2 infra retries, then failed.
    assert row("kill_always") == ("failed", 3, 2, 2)
    # max_infra_retries=0 beats the config: fails at once, like upstream.
    assert row("opt_out") == ("failed", 1, 0, 0)
    # An application failure spends the ordinary retry and never an infra retry.
    assert row("app_fail") == ("failed", 2, 1, 0)
    # Mapped task instances each have their own counter.
    for i in range(4):
        assert row("kill_twice", i) == ("success", 3, 2, 2), i

    # History: every retried lost try is archived with cause infra and the count as of its decision
    # (the last try of a task instance stays on its live row).
    hist = stack.history("aip122_ha")
    infra_tries = [h for h in hist if h["failure_cause"] == "infra"]
    assert len(infra_tries) == 1 + 2 + 4 * 2
    kill_always_hist = [
        (h["try_number"], h["infra_retry_count"]) for h in hist if h["task_id"] == "kill_always"
    ]
    assert kill_always_hist == [(1, 1), (2, 2)]

    # Each failure was decided exactly once.
    decisions = [d for text in logs for d in _decision_lines(text) if d["dag_id"] == "aip122_ha"]
    granted = [
        (d["task_id"], d["map_index"], d["try_number"]) for d in decisions if d["infra_retry"] == "granted"
    ]
    assert len(granted) == len(set(granted)) == 1 + 2 + 4 * 2
    denied = sorted((d["task_id"], d["reason"]) for d in decisions if d["infra_retry"] == "denied")
    assert denied == [("kill_always", "cap_reached")]
    # The opt-out is what the task asks for: no warning, only the scheduler's line for the failure.
    failures = [d for text in logs for d in _failure_lines(text) if d["dag_id"] == "aip122_ha"]
    opted_out = [(d["task_id"], d["infra_retry"]) for d in failures if d["infra_retry"].endswith(":task_opt_out")]
    assert opted_out == [("opt_out", "denied:task_opt_out")]

    # Listeners see failure_cause=infra with the state up_for_retry.
    heard = [
        (r["try_number"], r["state"], r["failure_cause"])
        for r in stack.jsonl("listener.jsonl")
        if r["dag_id"] == "aip122_ha" and r["task_id"] == "kill_once"
    ]
    assert heard == [(1, "up_for_retry", "infra")], heard

    # on_retry_callback fires for the infra retry with the cause in its context.
    def callbacks():
        got = [c for c in stack.jsonl("callbacks.jsonl") if c["task_id"] == "kill_once"]
        return got or None

    got = wait_for(callbacks, timeout=30, what="kill_once retry callback")
    assert [(c["kind"], c["failure_cause"]) for c in got] == [("retry", "infra")]

    # REST API v2 exposes the counter on the task instance and on each try.
    code = """
import json
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app
client = TestClient(create_app())
ti = client.get("/api/v2/dags/aip122_ha/dagRuns/~/taskInstances").json()["task_instances"]
run_id = ti[0]["dag_run_id"]
tries = client.get(f"/api/v2/dags/aip122_ha/dagRuns/{run_id}/taskInstances/kill_always/tries").json()
print(json.dumps({"tis": ti, "tries": tries}))
"""
    out = stack.base.run_python(code)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    by_task = {(t["task_id"], t["map_index"]): t for t in data["tis"]}
    assert by_task[("kill_once", -1)]["infra_retry_count"] == 1
    assert by_task[("kill_twice", 2)]["infra_retry_count"] == 2
    assert sorted(t["infra_retry_count"] for t in data["tries"]["task_instances"]) == [1, 2, 2]
