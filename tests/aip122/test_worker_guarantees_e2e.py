"""
End to end: the worker-side guarantees that make ``[core] max_infra_retries`` safe to turn on.

One stack for the module, on a private PostgreSQL database: ``api-server`` (Execution API),
``dag-processor`` and one ``scheduler`` with the LocalExecutor and ``max_infra_retries = 1``
(``infra_retry_delay = 1``). The heartbeat timeout is 300 s, so every failure below is seen by the
path under test. Dags: ``dags/aip122_guarantee_dags.py``.

* No second copy of a try: a task that SIGKILLs its supervisor on try 1 and keeps running must stop
  running task code before try 2 starts (the task process dies with its supervisor).
* Trust boundary: ``failure_cause="infra"`` forged by task code over the supervisor channel, or sent
  by any worker straight to the Execution API route, is recorded as ``unknown`` and never earns an
  infra retry.
* Callbacks of a killed task process run exactly once each, in the Dag processor, with the cause and
  the reason in their context, and its retry and failure e-mails are sent once each.
"""

from __future__ import annotations

import json
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
PROBE = HERE / "_route_spoof_probe.py"


def _http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status == 200


class Stack:
    def __init__(self, env: AirflowEnv, db_url: str, out: Path) -> None:
        self.env = env
        self.db_url = db_url
        self.out = out

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

    def ti(self, dag_id: str) -> dict[str, Any] | None:
        rows = self.query(f"SELECT * FROM {LIVE_TRIES} WHERE dag_id = %(d)s", d=dag_id)
        return rows[0] if len(rows) == 1 else None

    def tries(self, dag_id: str) -> list[dict[str, Any]]:
        """Every try of the Dag's one task instance: archived tries first, then the live row."""
        cols = "try_number, state, start_date, end_date, failure_cause, failure_reason, infra_retry_count"
        hist = self.query(
            f"SELECT {cols} FROM {PAST_TRIES} WHERE dag_id = %(d)s ORDER BY try_number", d=dag_id
        )
        return hist + self.query(f"SELECT {cols} FROM {LIVE_TRIES} WHERE dag_id = %(d)s", d=dag_id)

    def jsonl(self, name: str) -> list[dict[str, Any]]:
        path = self.out / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def trigger(self, dag_id: str) -> None:
        wait_for(
            lambda: self.query("SELECT 1 FROM dag WHERE dag_id = %(d)s", d=dag_id),
            timeout=90,
            what=f"dag {dag_id} parsed",
        )
        self.env.airflow("dags", "trigger", dag_id, timeout=120)

    def wait_finished(self, dag_id: str, timeout: float) -> dict[str, Any]:
        def done():
            ti = self.ti(dag_id)
            return ti if ti and ti["state"] in FINISHED else None

        try:
            return wait_for(done, timeout=timeout, interval=0.5, what=f"{dag_id} finished")
        except TimeoutError:
            print(self.tries(dag_id))
            for name in ("scheduler", "dag-processor"):
                print(f"==== {name}\n", self.env.log_text(name)[-6000:])
            raise


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if not pg_available():
        pytest.fail("PostgreSQL at 127.0.0.1:5432 is not reachable; run .ci/services.sh")
    home = tmp_path_factory.mktemp("aip122g")
    out = home / "out"
    out.mkdir()
    port = free_port()
    extra_env = {
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__MAX_INFRA_RETRIES": "1",
        "AIRFLOW__CORE__INFRA_RETRY_DELAY": "1",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API_AUTH__JWT_SECRET": "aip122g-" + uuid.uuid4().hex,
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "300",
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN": "0.05",
        "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX": "0.2",
        "AIP122G_OUT": str(out),
        # E-mails are recorded by a real backend callable instead of being sent over SMTP.
        "AIRFLOW__EMAIL__EMAIL_BACKEND": "aip122_email_sink.send_email",
        "PYTHONPATH": str(HERE / "pythonpath"),
    }
    with pg_database("t_aip122_guar") as db_url:
        env = AirflowEnv(VENV, home, db_url=db_url, extra_env=extra_env)
        shutil.copy(HERE / "dags" / "aip122_guarantee_dags.py", env.dags_folder)
        try:
            env.airflow("db", "migrate", timeout=300)
            env.start("api-server")
            wait_for(
                lambda: _http_ok(f"http://127.0.0.1:{port}/execution/health"),
                timeout=180,
                what="api-server health",
            )
            env.start("dag-processor")
            env.start("scheduler")
            yield Stack(env, db_url, out)
        finally:
            env.stop()


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_no_second_copy_of_a_try_after_a_lost_supervisor(stack: Stack):
    dag_id = "aip122_no_second_copy"
    stack.trigger(dag_id)
    ti = stack.wait_finished(dag_id, timeout=120)
    tries = stack.tries(dag_id)
    assert [(t["try_number"], t["failure_cause"]) for t in tries] == [(1, "infra"), (2, None)], tries
    assert ti["state"] == "success" and ti["infra_retry_count"] == 1
    # Give a surviving try-1 process time to show itself (it would write for 30 s).
    time.sleep(3)
    records = stack.jsonl("copy.jsonl")
    try1 = [r["t"] for r in records if r["try"] == 1]
    try2_start = [r["t"] for r in records if r["try"] == 2 and r.get("start")]
    assert any(r["try"] == 1 and r.get("before_kill") for r in records), "try 1 never ran its task code"
    assert len(try2_start) == 1, records[-5:]
    # The live row's start_date is try 2's start, as the Execution API recorded it.
    try2_db_start = ti["start_date"].timestamp()
    last_try1 = max(try1)
    assert last_try1 < try2_db_start, (
        f"try 1 was still running task code {last_try1 - try2_db_start:.1f}s after try 2 started"
    )
    assert last_try1 < try2_start[0]
    print(
        f"try 1 wrote {len(try1)} times; its last write was {try2_start[0] - last_try1:.1f}s "
        "before try 2's task code started"
    )


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_task_code_cannot_forge_infra_over_the_supervisor_channel(stack: Stack):
    dag_id = "aip122_spoof"
    stack.trigger(dag_id)
    ti = stack.wait_finished(dag_id, timeout=90)
    # Wait a little so that a (wrongly) granted retry would have been scheduled.
    time.sleep(4)
    ti = stack.ti(dag_id)
    assert ti["failure_cause"] == "unknown", ti
    assert ti["failure_reason"] == "forged by task code"
    assert ti["state"] == "failed"
    assert (ti["try_number"], ti["max_tries"], ti["infra_retry_count"]) == (1, 0, 0)
    assert stack.query(f"SELECT 1 FROM {PAST_TRIES} WHERE dag_id = %(d)s", d=dag_id) == []
    # The supervisor logged the downgrade in the task's log.
    logs = list((stack.env.home / "logs").rglob("*.log"))
    task_logs = [p for p in logs if f"dag_id={dag_id}" in str(p)]
    assert any("infra" in p.read_text() and "unknown" in p.read_text() for p in task_logs), task_logs


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_worker_reported_infra_at_the_route_is_unknown_and_never_granted(stack: Stack):
    dag_id = "aip122_route_probe"
    stack.trigger(dag_id)
    for task_id in ("probe_failed", "probe_retry"):
        wait_for(
            lambda t=task_id: stack.query(
                f"SELECT 1 FROM {LIVE_TRIES} WHERE dag_id = %(d)s AND task_id = %(t)s AND state = 'success'",
                d=dag_id,
                t=t,
            ),
            timeout=90,
            what=f"{task_id} success",
        )
        # The probe puts the TIs back to running: the scheduler must have consumed the executor's
        # event first, or it would see a running TI and fail it (state mismatch).
        wait_for(
            lambda t=task_id: f"TaskInstance Finished: dag_id={dag_id}, task_id={t},"
            in stack.env.log_text("scheduler"),
            timeout=60,
            what=f"the scheduler to process the executor event of {task_id}",
        )
    result = stack.env.run_python(PROBE.read_text(), timeout=120)
    probe = json.loads(result.stdout.strip().splitlines()[-1])

    failed = probe["probe_failed"]
    assert failed["status"] == 204, failed
    assert failed["ti"]["state"] == "failed"
    assert failed["ti"]["failure_cause"] == "unknown"
    assert failed["ti"]["failure_reason"] == "forged"
    assert (failed["ti"]["try_number"], failed["ti"]["max_tries"], failed["ti"]["infra_retry_count"]) == (
        probe["probe_failed_before"]["try_number"],
        0,
        0,
    )

    retry = probe["probe_retry"]
    assert retry["status"] == 204, retry
    # The worker asked for a retry: it keeps the ordinary decision, but no infra allowance is spent.
    assert retry["ti"]["failure_cause"] == "unknown"
    assert retry["ti"]["failure_reason"] == "forged retry"
    assert (retry["ti"]["max_tries"], retry["ti"]["infra_retry_count"]) == (0, 0), retry["ti"]
    assert "recorded as unknown" in result.stdout + result.stderr


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_callbacks_of_a_killed_task_process_run_once_each_in_the_dag_processor(stack: Stack):
    dag_id = "aip122_killed_callbacks"
    stack.trigger(dag_id)
    ti = stack.wait_finished(dag_id, timeout=120)
    assert ti["state"] == "failed" and ti["try_number"] == 2

    def both():
        got = [c for c in stack.jsonl("killed_callbacks.jsonl") if c["task_id"] == "oom_killed"]
        return got if len(got) >= 2 else None

    try:
        wait_for(both, timeout=60, what="the retry and the failure callback")
    except TimeoutError:
        print(stack.env.log_text("dag-processor")[-6000:])
        raise
    time.sleep(10)  # a duplicate would show up here
    got = [c for c in stack.jsonl("killed_callbacks.jsonl") if c["task_id"] == "oom_killed"]
    assert [(c["kind"], c["try_number"], c["failure_cause"]) for c in got] == [
        ("retry", 1, "unknown"),
        ("failure", 2, "unknown"),
    ], got
    for c in got:
        assert "SIGKILL" in (c["reason"] or ""), c
    # Both ran in the Dag processor (where scheduler-initiated task callbacks run), not in the
    # task processes, which were dead.
    callback_logs = [
        p.read_text(errors="replace") for p in (stack.env.home / "logs").rglob("*.log") if "dag_processor" in str(p)
    ]
    assert sum(text.count("Executing Task callback at index 0: callback") for text in callback_logs) == 2
    # email_on_retry / email_on_failure behave as for any failed try: one e-mail each, sent by the
    # Dag processor (the task process was dead).
    emails = [e for e in stack.jsonl("emails.jsonl") if "oom_killed" in e["subject"]]
    assert len(emails) == 2, emails
    assert [e["to"] for e in emails] == [["ops@example.invalid"]] * 2
    assert "Try 1 out of 2" in emails[0]["html"] and "Try 2 out of 2" in emails[1]["html"], emails
    assert all("SIGKILL" in e["html"] for e in emails)
    history = stack.query(
        f"SELECT try_number, state, failure_cause FROM {PAST_TRIES} WHERE dag_id = %(d)s", d=dag_id
    )
    assert [(h["try_number"], h["failure_cause"]) for h in history] == [(1, "unknown")]
