"""
End to end: every failure path the scheduler ends, with a real scheduler and dag-processor.

The scheduler runs a real executor class (``fixtures/pythonpath/aip97_fault_executor.py``) that
fails each task the way its task_id says (see that module). For each path the test checks the cause
and reason in the database (live row and history), the one scheduler log line per failure (upstream's
line for it, ending with the AIP-97 fields), the
listener plugin's records (a listener declaring ``failure_cause`` and one that does not), the
``context["failure_cause"]`` seen by failure/retry callbacks run by the dag-processor, the StatsD
packets (InfluxDB-tagged) and the REST API responses.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import harness
import lines
import pytest
import sqlalchemy as sa
from harness import StatsdReceiver

FIXTURES = Path(__file__).resolve().parent / "fixtures"

DAG_ID = "aip97_scheduler_paths"
EXPECTED = {
    # task_id: (final state, final try_number, cause, reason fragment, upstream text of its log line)
    "infra_fail": ("failed", 2, "infra", "Worker node lost", "finished with state failed, but"),
    "legacy_fail": ("failed", 1, "unknown", "legacy executor info", "finished with state failed, but"),
    "mismatch": ("failed", 1, "unknown", "reported state success", "finished with state success, but"),
    "stuck": ("failed", 1, "infra", "Stuck in queued", "Task was requeued more than"),
    "lost_heartbeat": (
        "failed",
        1,
        "unknown",
        "Heartbeat timeout",
        # 3.3 records it where its injected executor event is consumed; 3.4 in the purge, whose
        # message is the task instance's details.
        "Extra info: heartbeat timeout" if lines.LINE == lines.DEFAULT_LINE else "'Task Id': 'lost_heartbeat'",
    ),
}
#: 3.3 allocates a retry's try number in schedule_tis() (1 -> 2); 3.4 when it archives the failed try,
#: so its up_for_retry live row already carries the next try_number.
ALLOCATES_TRY_ON_ARCHIVE = lines.LINE != lines.DEFAULT_LINE


@dataclass
class Scenario:
    env: harness.AirflowEnv
    url: str
    scheduler_log: str
    listener_records: list[dict]
    callback_records: list[dict]
    statsd_lines: list[str]
    listener_out: Path


def _ti_rows(url: str, table: str) -> list[dict]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    f"SELECT task_id, state, try_number, failure_cause, failure_reason FROM {table} "
                    "WHERE dag_id = :d ORDER BY task_id, try_number"
                ),
                {"d": DAG_ID},
            ).mappings()
            return [dict(r) for r in rows]
    finally:
        engine.dispose()


_read_jsonl = harness.read_jsonl


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, patched_venv) -> Scenario:
    tmp = tmp_path_factory.mktemp("aip97_sched")
    listener_out, callback_out = tmp / "listener.jsonl", tmp / "callbacks.jsonl"
    with StatsdReceiver() as statsd:
        stack = harness.Stack(
            "t_aip97core_e2e",
            tmp / "home",
            venv=patched_venv,
            # No api-server: the fault-injecting executor runs no task, it reports their failures.
            components=("dag-processor", "scheduler"),
            executor="aip97_fault_executor.FaultInjectingExecutor",
            # The Dag runs @once: the scheduler's own Dag-run creation (use_job_schedule) stays on.
            tuned=False,
            dags=[FIXTURES / "dags" / "aip97_scheduler_paths.py"],
            plugins=[FIXTURES / "plugins" / "aip97_recording_listeners.py"],
            config={
                "PYTHONPATH": str(FIXTURES / "pythonpath"),
                "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "4",
                "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "1",
                "AIRFLOW__SCHEDULER__NUM_STUCK_IN_QUEUED_RETRIES": "0",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "3",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "1",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "1",
                # statsd is a test requirement (dev/requirements-test.txt): StatsD is always on here.
                "AIRFLOW__METRICS__STATSD_ON": "True",
                "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
                "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
                "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
                "AIP97_LISTENER_OUT": str(listener_out),
                "AIP97_CALLBACK_OUT": str(callback_out),
            },
        )
        with stack:
            url = stack.db_url

            def done() -> bool:
                rows = {r["task_id"]: r["state"] for r in _ti_rows(url, lines.LIVE_TRIES)}
                finished = all(rows.get(t) == "failed" for t in EXPECTED)
                finished = finished and rows.get("downstream") == "upstream_failed"
                finished = finished and rows.get("skipped_by_rule") == "skipped"
                callbacks = _read_jsonl(callback_out)
                # infra_fail: retry + failure callback; legacy_fail: failure callback.
                return finished and len(callbacks) >= 3

            stack.wait_for(done, timeout=80, interval=1, what="all task instances failed")
            stack.stop("scheduler")
            stack.stop("dag-processor")
            yield Scenario(
                env=stack.env,
                url=url,
                scheduler_log=stack.log_text("scheduler"),
                listener_records=_read_jsonl(listener_out),
                callback_records=_read_jsonl(callback_out),
                statsd_lines=list(statsd.lines),
                listener_out=listener_out,
            )


def _log_lines(scenario: Scenario) -> list[dict[str, str]]:
    return harness.failure_lines(scenario.scheduler_log)


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_cause_and_reason_are_persisted(scenario):
    live = {r["task_id"]: r for r in _ti_rows(scenario.url, lines.LIVE_TRIES)}
    for task_id, (state, try_number, cause, reason, _) in EXPECTED.items():
        row = live[task_id]
        assert (row["state"], row["try_number"], row["failure_cause"]) == (
            state,
            try_number,
            cause,
        ), row
        assert reason in row["failure_reason"], row
    # The stuck task had retries=2 but is failed at once: requeueing was its retry.
    assert live["stuck"]["try_number"] == 1
    # upstream_failed: the task did not fail, it never ran; no cause.
    assert live["downstream"]["state"] == "upstream_failed"
    assert (
        live["downstream"]["failure_cause"],
        live["downstream"]["failure_reason"],
    ) == (None, None)
    assert live["skipped_by_rule"]["state"] == "skipped"
    assert (
        live["skipped_by_rule"]["failure_cause"],
        live["skipped_by_rule"]["failure_reason"],
    ) == (None, None)

    history = _ti_rows(scenario.url, lines.PAST_TRIES)
    infra_tries = [r for r in history if r["task_id"] == "infra_fail"]
    assert [(r["try_number"], r["failure_cause"]) for r in infra_tries] == [
        (1, "infra")
    ]
    assert "Worker node lost" in infra_tries[0]["failure_reason"]


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_exactly_one_log_line_per_failure(scenario):
    lines = _log_lines(scenario)
    by_task: dict[str, list[dict]] = {}
    for fields in lines:
        by_task.setdefault(fields["task_id"], []).append(fields)
    assert set(by_task) == set(
        EXPECTED
    )  # nothing for the upstream_failed and skipped tasks
    for task_id, (_, try_number, cause, reason, upstream_text) in EXPECTED.items():
        expected_tries = list(range(1, try_number + 1))
        assert [int(f["try_number"]) for f in by_task[task_id]] == expected_tries, (
            by_task[task_id]
        )
        for fields in by_task[task_id]:
            assert fields["failure_cause"] == cause
            assert reason in fields["failure_reason"]
            # The line upstream already logs for the failure, its text unchanged, carries the fields.
            assert upstream_text in fields["message"], fields
    # No line of its own for a failure handle_failure() recorded (every path here).
    assert "Task instance failure recorded" not in scenario.scheduler_log
    assert [f["retry"] for f in by_task["infra_fail"]] == ["up_for_retry", "failed"]
    for task_id in ("legacy_fail", "mismatch", "stuck", "lost_heartbeat"):
        assert by_task[task_id][0]["retry"] == "failed"


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_listeners_receive_the_cause(scenario):
    aware = [r for r in scenario.listener_records if r["listener"] == "cause_aware"]
    legacy = [r for r in scenario.listener_records if r["listener"] == "legacy"]
    got = sorted((r["task_id"], r["failure_cause"]) for r in aware)
    want = sorted(
        (task_id, cause)
        for task_id, (_, tries, cause, _, _) in EXPECTED.items()
        for _ in range(tries)
    )
    assert got == want
    # The listener written before AIP-97 (no failure_cause argument) is still called every time.
    assert sorted(r["task_id"] for r in legacy) == sorted(t for t, _ in want)
    stuck = next(r for r in aware if r["task_id"] == "stuck")
    assert stuck["state"] == "failed" and "Stuck in queued" in stuck["failure_reason"]


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_callback_context_carries_the_cause(scenario):
    got = sorted((r["task_id"], r["failure_cause"]) for r in scenario.callback_records)
    assert got == [
        ("infra_fail", "infra"),
        ("infra_fail", "infra"),
        ("legacy_fail", "unknown"),
    ]


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_statsd_metrics_carry_the_cause(scenario):
    lines = scenario.statsd_lines

    def count(prefix: str, *tags: str) -> int:
        return sum(
            int(re.search(r":(\d+)\|c", line).group(1))
            for line in lines
            if line.startswith(prefix) and all(t in line for t in tags)
        )

    # Legacy (plain StatsD) name, with the remaining tags in InfluxDB form.
    assert (
        count(
            "airflow.ti.failure_cause.infra,", "task_id=infra_fail", f"dag_id={DAG_ID}"
        )
        == 2
    )
    assert count("airflow.ti.failure_cause.infra,", "task_id=stuck") == 1
    assert count("airflow.ti.failure_cause.unknown,", "task_id=lost_heartbeat") == 1
    # Modern name with failure_cause as a tag.
    assert (
        count(
            "airflow.ti.failure_cause,", "failure_cause=unknown", "task_id=legacy_fail"
        )
        == 1
    )
    assert (
        count("airflow.ti_failures,", "failure_cause=infra", "task_id=infra_fail") == 2
    )
    assert (
        count("airflow.operator_failures", "failure_cause=unknown", "task_id=mismatch")
        >= 1
    )


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_rest_api_exposes_cause_and_reason(scenario):
    code = f"""
import json
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app
client = TestClient(create_app())
base = "/api/v2/dags/{DAG_ID}/dagRuns/~/taskInstances"
tis = client.get(base).json()["task_instances"]
tries = client.get("/api/v2/dags/{DAG_ID}/dagRuns/~/taskInstances/infra_fail/tries")
runs = client.get("/api/v2/dags/{DAG_ID}/dagRuns").json()["dag_runs"]
run_id = runs[0]["dag_run_id"]
tries = client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{{run_id}}/taskInstances/infra_fail/tries").json()
marked = client.patch(
    f"/api/v2/dags/{DAG_ID}/dagRuns/{{run_id}}/taskInstances/downstream", json={{"new_state": "failed"}}
)
assert marked.status_code == 200, marked.text
after = client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{{run_id}}/taskInstances/downstream").json()
print(json.dumps({{"tis": tis, "tries": tries, "marked": after}}))
"""
    env = dict(scenario.env.env)
    scenario.env.env.update(
        {
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
        }
    )
    try:
        out = scenario.env.run_python(code)
    finally:
        scenario.env.env = env
    data = json.loads(out.stdout.strip().splitlines()[-1])
    tis = {ti["task_id"]: ti for ti in data["tis"]}
    for task_id, (_, _, cause, reason, _) in EXPECTED.items():
        assert tis[task_id]["failure_cause"] == cause
        assert reason in tis[task_id]["failure_reason"]
    # Mark-failed by a user: failed, but no cause; the listener is called with failure_cause=None.
    assert data["marked"]["state"] == "failed"
    assert (data["marked"]["failure_cause"], data["marked"]["failure_reason"]) == (
        None,
        None,
    )
    records = [
        r
        for r in _read_jsonl(scenario.listener_out)
        if r["listener"] == "cause_aware" and r["task_id"] == "downstream"
    ]
    assert [r["failure_cause"] for r in records] == [None]
    tries = {t["try_number"]: t for t in data["tries"]["task_instances"]}
    assert (
        tries[1]["failure_cause"] == "infra"
        and "Worker node lost" in tries[1]["failure_reason"]
    )
    assert tries[2]["failure_cause"] == "infra"


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_a_new_try_starts_clean(scenario):
    """schedule_tis() (next try) and clear_task_instances() reset the live row; history keeps the cause."""
    code = f"""
from sqlalchemy import select, update
from airflow.models.dagbag import DBDagBag
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance as TI
from airflow.utils.session import create_session
with create_session() as session:
    session.execute(update(TI).where(TI.dag_id == "{DAG_ID}", TI.task_id == "lost_heartbeat")
                    .values(state="up_for_retry"))
    ti = session.scalar(select(TI).where(TI.dag_id == "{DAG_ID}", TI.task_id == "lost_heartbeat"))
    assert ti.failure_cause == "unknown"
    if {ALLOCATES_TRY_ON_ARCHIVE}:
        # 3.4 allocates the next try when it archives the failed one (the pending up_for_retry row
        # already carries it): what handle_failure() does for a try that goes up for retry.
        ti = ti.prepare_db_for_next_try(session)
        assert (ti.try_number, ti.failure_cause) == (2, "unknown")
    dr = session.scalar(select(DagRun).where(DagRun.dag_id == "{DAG_ID}"))
    ti.task = DBDagBag().get_dag_for_run(dag_run=dr, session=session).get_task("lost_heartbeat")
    assert dr.schedule_tis([ti], session=session) == 1
"""
    scenario.env.run_python(code)
    scenario.env.airflow("tasks", "clear", DAG_ID, "-t", "infra_fail", "-y")

    live = {r["task_id"]: r for r in _ti_rows(scenario.url, lines.LIVE_TRIES)}
    assert live["lost_heartbeat"]["state"] == "scheduled"
    assert live["lost_heartbeat"]["try_number"] == 2
    assert (
        live["lost_heartbeat"]["failure_cause"],
        live["lost_heartbeat"]["failure_reason"],
    ) == (None, None)
    assert live["infra_fail"]["state"] is None
    assert (
        live["infra_fail"]["failure_cause"],
        live["infra_fail"]["failure_reason"],
    ) == (None, None)
    history = [
        r
        for r in _ti_rows(scenario.url, lines.PAST_TRIES)
        if r["task_id"] == "infra_fail"
    ]
    assert [(r["try_number"], r["failure_cause"]) for r in history] == [
        (1, "infra"),
        (2, "infra"),
    ]
