"""
Loop protection end to end ([core] asset_emit_max_chain_depth, 3 on the shared stack).

Real api-server, Dag processor, scheduler and LocalExecutor task processes (the shared stack), and
the Dags of ``dags/emit_loop_dags.py``:

* the loop: ``emit_loop_incident``'s task fails, its failure callback emits ``emit_loop_investigate``,
  which triggers ``emit_loop_investigate``, which fails and emits it again. It stops at the limit:
  every event is recorded, the run that would exceed the limit is not created (the number of
  asset-triggered runs equals the limit), and the stopped event says why in the REST API, in the
  api-server's log and in the ``asset.emit_chain.stopped`` metric;
* a legitimate chain within the limit (A emits -> B runs and emits -> C runs) is unaffected;
* a limit of 0, a negative limit or a non-number is refused at start-up, naming the option.
"""

from __future__ import annotations

import sys
import time

import harness
import pytest
from conftest import MAX_CHAIN_DEPTH, STATSD

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

INVESTIGATE = "emit_loop_investigate"


def _asset_id(stack, name: str) -> int:
    [row] = stack.query("SELECT id FROM asset WHERE name = %(n)s", n=name)
    return row["id"]


def _rest_events(stack, name: str) -> list[dict]:
    resp = stack.rest("GET", "/assets/events", params={"asset_id": _asset_id(stack, name), "limit": 100})
    assert resp.status_code == 200, resp.text
    return sorted(resp.json()["asset_events"], key=lambda e: e["id"])


def _runs(stack, dag_id: str) -> list[dict]:
    return stack.query(
        "SELECT run_id, run_type, state FROM dag_run WHERE dag_id = %(d)s ORDER BY id", d=dag_id
    )


def test_a_failure_signal_loop_stops_at_the_limit(stack):
    run_id = stack.trigger("emit_loop_incident")
    assert stack.wait_run_finished("emit_loop_incident", run_id) == "failed"

    # The loop runs until an event is stopped; it must stop by itself.
    stopped = stack.wait_for(
        lambda: [e for e in _rest_events(stack, INVESTIGATE) if e["emit_chain_stop_reason"]],
        timeout=480,
        what="the loop's stopped event",
        logs=("scheduler", "api-server"),
    )
    # Give the scheduler a few loops to show that no further run appears.
    time.sleep(15)
    runs = _runs(stack, "emit_loop_investigate")
    assert [r["run_type"] for r in runs] == ["asset_triggered"] * MAX_CHAIN_DEPTH, runs
    assert all(r["state"] == "failed" for r in runs), runs

    events = _rest_events(stack, INVESTIGATE)
    # Every emitted event is recorded: the incident's and each investigate run's, the stopped one too.
    assert len(events) == MAX_CHAIN_DEPTH + 1, events
    assert [e["source_dag_id"] for e in events] == ["emit_loop_incident"] + ["emit_loop_investigate"] * MAX_CHAIN_DEPTH
    for depth, event in enumerate(events, start=1):
        chain = event["emit_chain"]
        assert len(chain) == depth
        assert chain[0] == {"dag_id": "emit_loop_incident", "run_id": run_id, "asset_name": INVESTIGATE}
        assert chain[-1]["run_id"] == event["source_run_id"]
    # Within the limit each event triggered a run; the one past it triggered none, and says why.
    assert [bool(e["created_dagruns"]) for e in events] == [True] * MAX_CHAIN_DEPTH + [False]
    assert [e["emit_chain_stop_reason"] is not None for e in events] == [False] * MAX_CHAIN_DEPTH + [True]
    [last] = stopped
    assert last["id"] == events[-1]["id"]
    assert last["emit_chain_stop_reason"].startswith(
        f"emit chain of {MAX_CHAIN_DEPTH + 1} Dag runs is longer than [core] asset_emit_max_chain_depth "
        f"({MAX_CHAIN_DEPTH}): the event is recorded but triggers no Dag run"
    )
    assert stack.query(
        "SELECT count(*) AS n FROM asset_dag_run_queue q JOIN asset a ON a.id = q.asset_id WHERE a.name = %(n)s",
        n=INVESTIGATE,
    ) == [{"n": 0}]
    # The metric and the log line.
    metric = stack.wait_for(
        lambda: [
            tags
            for name, tags in STATSD.tagged()
            if name == "airflow.asset.emit_chain.stopped" and tags.get("dag_id") == "emit_loop_investigate"
        ],
        timeout=30,
        what="the asset.emit_chain.stopped metric",
    )
    assert len(metric) == 1, metric
    api_log = stack.log_text("api-server")
    assert "Emitted asset event triggers no Dag run: its emit chain is over the limit" in api_log


def test_a_legitimate_chain_within_the_limit_is_unaffected(stack):
    run_id = stack.trigger("emit_chain_a")
    stack.wait_run_finished("emit_chain_a", run_id)
    c_runs = stack.wait_for(
        lambda: [r for r in _runs(stack, "emit_chain_c") if r["state"] in ("success", "failed")],
        timeout=240,
        what="emit_chain_c's run",
        logs=("scheduler",),
    )
    assert [(r["run_type"], r["state"]) for r in c_runs] == [("asset_triggered", "success")]
    [b_run] = _runs(stack, "emit_chain_b")
    [bc] = _rest_events(stack, "emit_chain_bc")
    assert bc["emit_chain_stop_reason"] is None
    assert [(link["dag_id"], link["run_id"]) for link in bc["emit_chain"]] == [
        ("emit_chain_a", run_id),
        ("emit_chain_b", b_run["run_id"]),
    ]
    assert bc["created_dagruns"][0]["run_id"] == c_runs[0]["run_id"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "`[core] asset_emit_max_chain_depth` should be an integer of 1 or more, not '0'"),
        ("-1", "`[core] asset_emit_max_chain_depth` should be an integer of 1 or more, not '-1'"),
        ("abc", 'Please check "asset_emit_max_chain_depth" key in "core" section. Current value: "abc"'),
    ],
)
@pytest.mark.timeout(240)
def test_a_bad_limit_is_refused_at_start_up(tmp_path, value, message):
    env = harness.AirflowEnv(
        sys.prefix, tmp_path / "home", extra_env={"AIRFLOW__CORE__ASSET_EMIT_MAX_CHAIN_DEPTH": value}
    )
    proc = env.airflow("api-server", "--port", str(harness.free_port()), check=False, timeout=200)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert "AirflowConfigException" in output, output[-3000:]
    assert message in output, output[-3000:]
