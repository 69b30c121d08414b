#!/usr/bin/env python
"""
Benchmark: explicit asset-event emission (``asset.emit()``) against the REST API it replaces.

Starts a private Airflow stack (PostgreSQL database, ``airflow api-server``, ``dag-processor``,
``scheduler`` with the LocalExecutor) from the venv whose Python runs this script, triggers a Dag
whose single task makes N sequential calls on each of three paths, **interleaved call by call**
(the order rotates every call, so load spikes on the shared machine hit all paths alike):

* ``asset.emit()``: task -> supervisor -> ``POST /execution/asset-events`` -> DB commit;
* ``POST /execution/asset-events`` straight from the task with its own execution token (the same
  route without the supervisor hop; only for the breakdown);
* the public REST API ``POST /api/v2/assets/events`` with a bearer token, for the same asset (the
  only way to publish mid-task on unpatched 3.3.2);
* ``POST /execution/asset-events`` straight from the task to a **second api-server** on the same
  database with ``[core] asset_emit_authorization = any``: the same route without the declared-
  publication check. Side by side with the direct call to the first api-server (``declared``, the
  default) it gives the check's cost on the route's path, and the emit p50 with the check against
  the emit p50 it would have without it (emit minus the difference of the two route p50s).

It prints p50/p95 latency and events/s per path and their ratio over all calls (the table), the
spread of the per-repeat p50 ratio (the N calls are cut into R repeats), a breakdown of one emit
(supervisor hop, HTTP + framework, and the server's own work split by SQL statement, measured by
running the route's service function in-process with SQLAlchemy cursor events), and the latency
from ``emit()`` returning to the consumer Dag run being created (the run's ``queued_at``).

Usage:  .venv/bin/python benchmarks/asset_emit.py [--calls 600] [--repeats 6] [--triggers 5]
Needs PostgreSQL at 127.0.0.1:5432 (postgres/postgres). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
import uuid
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import harness  # noqa: E402

BENCH_DAG = """
from __future__ import annotations

import os
import statistics
import time

import httpx

from airflow.sdk import Asset, PartitionedAssetTimetable, dag, task

TARGET = Asset("bench_emit_target")
TRIGGER = Asset("bench_emit_trigger")
CALLS = int(os.environ["BENCH_CALLS"])
TRIGGERS = int(os.environ["BENCH_TRIGGERS"])
API = os.environ["BENCH_API_URL"]
API_ANY = os.environ["BENCH_API_ANY_URL"]


@dag(schedule=None)
def bench_asset_emit():
    # Its outlets declare what it emits to ([core] asset_emit_authorization = declared).
    @task(outlets=[TARGET, TRIGGER])
    def bench(ti=None):
        from airflow.api_fastapi.execution_api.app import _jwt_generator

        token = httpx.get(f"{API}/auth/token", timeout=30).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        rest_client = httpx.Client(base_url=f"{API}/api/v2", headers=headers, timeout=30)
        asset_id = rest_client.get("/assets", params={"name_pattern": TARGET.name}).json()["assets"][0]["id"]
        ti_token = _jwt_generator().generate(extras={"sub": str(ti.id), "scope": "execution"})
        exec_client = httpx.Client(
            base_url=f"{API}/execution",
            headers={"Authorization": f"Bearer {ti_token}", "Airflow-API-Version": "2026-11-30"},
            timeout=30,
        )
        exec_any_client = httpx.Client(
            base_url=f"{API_ANY}/execution",
            headers={"Authorization": f"Bearer {ti_token}", "Airflow-API-Version": "2026-11-30"},
            timeout=30,
        )

        def via_emit(n):
            TARGET.emit(extra={"n": n})

        def via_rest(n):
            body = {"asset_id": asset_id, "extra": {"n": n}}
            rest_client.post("/assets/events", json=body).raise_for_status()

        def via_route(n):
            exec_client.post(
                "/asset-events",
                json={"name": TARGET.name, "extra": {"n": n}, "idempotency_key": f"direct-{ti.id}-{n}"},
            ).raise_for_status()

        def via_route_any(n):
            exec_any_client.post(
                "/asset-events",
                json={"name": TARGET.name, "extra": {"n": n}, "idempotency_key": f"any-{ti.id}-{n}"},
            ).raise_for_status()

        paths = {"emit": via_emit, "rest": via_rest, "route": via_route, "route_any": via_route_any}
        samples = {name: [] for name in paths}
        order = list(paths)
        for n in range(-20, CALLS):  # 20 warm-up rounds, not recorded
            order = order[1:] + order[:1]
            for name in order:
                t0 = time.perf_counter()
                paths[name](n)
                if n >= 0:
                    samples[name].append(time.perf_counter() - t0)
        rest_client.close()
        exec_client.close()
        exec_any_client.close()

        returned = {}
        for k in range(TRIGGERS):
            key = f"t-{k}"
            TRIGGER.emit(partition_key=key, idempotency_key=f"bench-{key}")
            returned[key] = time.time()
            time.sleep(3)
        return {"samples": samples, "trigger_returned": returned, "ti_id": str(ti.id)}

    bench()


@dag(schedule=PartitionedAssetTimetable(assets=TRIGGER))
def bench_asset_emit_consumer():
    @task
    def noop():
        return None

    noop()


bench_asset_emit()
bench_asset_emit_consumer()
"""


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": 1000 * statistics.median(ordered),
        "p95_ms": 1000 * ordered[int(0.95 * (len(ordered) - 1))],
        "events_per_s": len(ordered) / sum(ordered),
    }


#: How the breakdown names the statements the route's service function runs.
_STAGES = (
    (
        # Once per task and api-server process: the identity of a try is remembered after that.
        "provenance look-up (task_instance; first call only)",
        lambda sql: sql.startswith("select") and " from task_instance" in sql,
    ),
    (
        # Once per Dag version and api-server process: the declaration is remembered after that.
        "declaration look-up (serialized_dag; first call only)",
        lambda sql: sql.startswith("select") and " from serialized_dag" in sql,
    ),
    (
        # Once per Dag run and api-server process (loop protection): the chain the run inherits.
        "emit-chain look-up (dagrun_asset_event; first call only)",
        lambda sql: sql.startswith("select asset_event.emit_chain"),
    ),
    (
        "asset look-up (asset + asset_active)",
        lambda sql: sql.startswith("select") and "left outer join asset_active" in sql,
    ),
    ("idempotency key claim (INSERT)", lambda sql: sql.startswith("insert into asset_event_idempotency_key")),
    ("event INSERT", lambda sql: sql.startswith("insert into asset_event ")),
    ("idempotency key link (UPDATE)", lambda sql: sql.startswith("update asset_event_idempotency_key")),
    ("consumer look-ups + queueing (asset manager)", lambda sql: True),
)


def _server_breakdown(ti_id: str, asset_name: str, calls: int) -> dict[str, float]:
    """
    Median ms per stage of the route's server work, run in-process against the same database.

    Calls the real ``resolve_task_source`` and ``emit_asset_event`` (what the route calls) and
    times every SQL statement with SQLAlchemy cursor events and the commit with session events.
    """
    from uuid import UUID

    from sqlalchemy import event
    from sqlalchemy.orm import Session

    from airflow import settings
    from airflow.assets.emission import emit_asset_event, resolve_task_source

    settings.configure_orm()
    current: dict[str, float] = {}
    marks: dict[str, float] = {}

    def before_cursor(conn, cursor, statement, parameters, context, executemany):
        marks["sql"] = time.perf_counter()

    def after_cursor(conn, cursor, statement, parameters, context, executemany):
        sql = " ".join(statement.split()).lower()
        stage = next(name for name, matches in _STAGES if matches(sql))
        current[stage] = current.get(stage, 0.0) + time.perf_counter() - marks["sql"]

    def before_commit(session):
        marks["commit"] = time.perf_counter()

    def after_commit(session):
        current["commit"] = current.get("commit", 0.0) + time.perf_counter() - marks["commit"]

    event.listen(settings.engine, "before_cursor_execute", before_cursor)
    event.listen(settings.engine, "after_cursor_execute", after_cursor)
    event.listen(Session, "before_commit", before_commit)
    event.listen(Session, "after_commit", after_commit)
    per_stage: dict[str, list[float]] = {}
    ti_uuid = UUID(ti_id)
    for n in range(-20, calls):
        current.clear()
        session = settings.Session()
        t0 = time.perf_counter()
        source = resolve_task_source(ti_uuid, session=session)
        emit_asset_event(
            name=asset_name,
            uri=None,
            extra={"n": n},
            partition_key=None,
            partition_date=None,
            idempotency_key=f"breakdown-{uuid.uuid4()}",
            source=source,
            session=session,
        )
        total = time.perf_counter() - t0
        session.close()
        if n < 0:
            continue
        current["Python (validation, ORM, asset manager)"] = total - sum(current.values())
        current["total"] = total
        for stage, seconds in current.items():
            per_stage.setdefault(stage, []).append(seconds)
    return {stage: 1000 * statistics.median(values) for stage, values in per_stage.items()}


def _report(args, samples: dict[str, list[float]], server: dict[str, float], lags: list[float]) -> None:
    emit, rest, route, route_any = (_stats(samples[name]) for name in ("emit", "rest", "route", "route_any"))
    print(
        f"asset.emit() benchmark: {args.calls} calls per path from one task, interleaved call by call "
        "(same run, same asset)"
    )
    print(f"{'':34}{'p50 ms':>10}{'p95 ms':>10}{'events/s':>12}")
    for label, st in (
        ("asset.emit() (Execution API)", emit),
        ("REST POST /api/v2/assets/events", rest),
    ):
        print(f"{label:34}{st['p50_ms']:>10.2f}{st['p95_ms']:>10.2f}{st['events_per_s']:>12.1f}")
    print(
        f"ratio emit/REST: p50 {emit['p50_ms'] / rest['p50_ms']:.2f}x, "
        f"p95 {emit['p95_ms'] / rest['p95_ms']:.2f}x, "
        f"throughput {emit['events_per_s'] / rest['events_per_s']:.2f}x"
    )
    check_ms = route["p50_ms"] - route_any["p50_ms"]
    print("declared publication: the route with the check ([core] asset_emit_authorization = declared)")
    print("and without it (= any, a second api-server on the same database), interleaved:")
    for label, st in (
        ("route, declared (check on)", route),
        ("route, any (check off)", route_any),
    ):
        print(f"  {label:32}{st['p50_ms']:>10.2f}{st['p95_ms']:>10.2f}{st['events_per_s']:>12.1f}")
    print(
        f"  ratio route declared/any: p50 {route['p50_ms'] / route_any['p50_ms']:.3f}x; "
        f"emit p50 with the check / without it: {emit['p50_ms']:.2f} / {emit['p50_ms'] - check_ms:.2f} ms "
        f"= {emit['p50_ms'] / (emit['p50_ms'] - check_ms):.3f}x (target <= 1.05)"
    )
    size = len(samples["emit"]) // args.repeats
    p50_ratios, tput_ratios, check_ratios = [], [], []
    for r in range(args.repeats):
        chunk = {name: values[r * size : (r + 1) * size] for name, values in samples.items()}
        e, s = _stats(chunk["emit"]), _stats(chunk["rest"])
        p50_ratios.append(e["p50_ms"] / s["p50_ms"])
        tput_ratios.append(e["events_per_s"] / s["events_per_s"])
        check_ratios.append(_stats(chunk["route"])["p50_ms"] / _stats(chunk["route_any"])["p50_ms"])
    print(
        f"spread over {args.repeats} repeats of {size} calls: p50 ratio emit/REST "
        f"min {min(p50_ratios):.2f}x / median {statistics.median(p50_ratios):.2f}x / "
        f"max {max(p50_ratios):.2f}x; "
        f"throughput ratio min {min(tput_ratios):.2f}x / median {statistics.median(tput_ratios):.2f}x / "
        f"max {max(tput_ratios):.2f}x; route p50 ratio declared/any min {min(check_ratios):.3f}x / "
        f"median {statistics.median(check_ratios):.3f}x / max {max(check_ratios):.3f}x"
    )
    print("breakdown of one emit (medians, ms):")
    rows = [
        ("asset.emit() in the task", emit["p50_ms"]),
        ("  supervisor hop (emit - direct route call)", emit["p50_ms"] - route["p50_ms"]),
        ("POST /execution/asset-events from the task", route["p50_ms"]),
        ("  HTTP, auth, FastAPI/Cadwyn (route - server work)", route["p50_ms"] - server["total"]),
        ("  server work in-process (resolve + emit_asset_event)", server["total"]),
    ]
    stages = [name for name, _ in _STAGES] + ["commit", "Python (validation, ORM, asset manager)"]
    rows += [(f"    {name}", server.get(name, 0.0)) for name in stages]
    for label, ms in rows:
        print(f"  {label:58}{ms:>8.2f}")
    print(
        f"emit() returned -> consumer Dag run queued ({len(lags)} samples): "
        f"p50 {1000 * statistics.median(lags):.0f} ms, max {1000 * lags[-1]:.0f} ms"
    )
    print(
        json.dumps(
            {
                "emit": emit,
                "rest": rest,
                "route": route,
                "route_any": route_any,
                "route_p50_ratio_declared_any_per_repeat": check_ratios,
                "emit_p50_ratio_check": emit["p50_ms"] / (emit["p50_ms"] - check_ms),
                "p50_ratio_per_repeat": p50_ratios,
                "throughput_ratio_per_repeat": tput_ratios,
                "server_ms": server,
                "trigger_lag_s": lags,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--calls", type=int, default=600, help="calls per path, interleaved")
    parser.add_argument("--repeats", type=int, default=6, help="cut the calls into this many repeats")
    parser.add_argument("--server-calls", type=int, default=300, help="in-process calls for the breakdown")
    parser.add_argument("--triggers", type=int, default=5)
    args = parser.parse_args()

    import httpx

    home = Path(tempfile.mkdtemp(prefix="bench-emit-"))
    stack = harness.Stack(
        "t_emit_bench",
        home,
        # Upstream's defaults but for a quick scheduler and Dag discovery, as before.
        tuned=False,
        config={
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "BENCH_CALLS": str(args.calls),
            "BENCH_TRIGGERS": str(args.triggers),
        },
    )
    stack.env.env["BENCH_API_URL"] = stack.api_url
    any_port = harness.free_port()
    stack.env.env["BENCH_API_ANY_URL"] = f"http://127.0.0.1:{any_port}"
    (stack.dags_folder / "bench_asset_emit.py").write_text(textwrap.dedent(BENCH_DAG))
    ok = False
    try:
        stack.start()
        # The same api-server without the declared-publication check, on the same database.
        stack.start_component(
            "api-server",
            name="api-server-any",
            config={"AIRFLOW__API__PORT": str(any_port), "AIRFLOW__CORE__ASSET_EMIT_AUTHORIZATION": "any"},
        )
        stack.wait_for(
            lambda: harness.http_ok(f"http://127.0.0.1:{any_port}/api/v2/monitor/health"),
            timeout=120,
            what="the second api-server (asset_emit_authorization = any)",
        )
        rest = httpx.Client(base_url=f"{stack.api_url}/api/v2", timeout=30)

        def up():
            return (
                rest.get("/dags", params={"dag_id_pattern": "bench_asset_emit"}).json()["total_entries"] >= 2
            )

        stack.wait_for(up, timeout=180, what="the benchmark Dags")
        run_id = stack.trigger("bench_asset_emit")

        def finished():
            state = rest.get(f"/dags/bench_asset_emit/dagRuns/{run_id}").json()["state"]
            return state if state in ("success", "failed") else None

        state = stack.wait_for(finished, timeout=1800, what="the benchmark task")
        if state != "success":
            raise SystemExit(f"benchmark task {state}; see {home}/logs/scheduler.log")
        result = rest.get(
            f"/dags/bench_asset_emit/dagRuns/{run_id}/taskInstances/bench/xcomEntries/return_value"
        ).json()["value"]

        def consumer_runs():
            runs = rest.get("/dags/bench_asset_emit_consumer/dagRuns", params={"limit": 100}).json()[
                "dag_runs"
            ]
            by_key = {r["partition_key"]: r for r in runs}
            return by_key if set(result["trigger_returned"]) <= set(by_key) else None

        by_key = stack.wait_for(consumer_runs, timeout=120, what="the consumer runs")
        lags = sorted(
            datetime.fromisoformat(by_key[key]["queued_at"]).timestamp() - returned
            for key, returned in result["trigger_returned"].items()
        )

        os.environ.update(stack.process_env())  # this process talks to the benchmark database too
        server = _server_breakdown(result["ti_id"], "bench_emit_target", args.server_calls)
        _report(args, result["samples"], server, lags)
        ok = True
    finally:
        stack.stop()
        if ok:
            shutil.rmtree(home, ignore_errors=True)
        else:
            print(f"logs kept in {home}", file=sys.stderr)


if __name__ == "__main__":
    main()
