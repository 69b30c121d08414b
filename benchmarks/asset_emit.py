#!/usr/bin/env python
"""
Benchmark: explicit asset-event emission (``asset.emit()``) from inside one running task.

Starts a private Airflow stack (PostgreSQL database, ``airflow api-server``, ``dag-processor``,
``scheduler`` with the LocalExecutor) from the venv whose Python runs this script, triggers a Dag
whose single task

* calls ``asset.emit()`` N times sequentially (task -> supervisor -> Execution API -> DB commit),
* calls the public REST API ``POST /api/v2/assets/events`` N times from the same task, with a
  bearer token, for the same asset (the only way to publish mid-task on unpatched 3.3.2),
* emits K events for a partitioned consumer Dag, spaced apart, recording when each ``emit()``
  returned,

and prints p50/p95 latency and events/s for both, their ratio, and the latency from ``emit()``
returning to the consumer Dag run being created (the run's ``queued_at``).

Usage:  /work/venvs/emit/bin/python benchmarks/asset_emit.py [--calls 500] [--triggers 5]
Needs PostgreSQL at 127.0.0.1:5432 (postgres/postgres). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from datetime import datetime
from pathlib import Path

PG_ADMIN = "postgresql://postgres:postgres@127.0.0.1:5432/postgres"

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


def _stats(samples):
    samples = sorted(samples)
    total = sum(samples)
    return {
        "p50_ms": 1000 * statistics.median(samples),
        "p95_ms": 1000 * samples[int(0.95 * (len(samples) - 1))],
        "events_per_s": len(samples) / total,
    }


@dag(schedule=None)
def bench_asset_emit():
    @task(inlets=[TARGET])
    def bench():
        emit = []
        for n in range(CALLS):
            t0 = time.perf_counter()
            TARGET.emit(extra={"n": n})
            emit.append(time.perf_counter() - t0)

        token = httpx.get(f"{API}/auth/token", timeout=30).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with httpx.Client(base_url=f"{API}/api/v2", headers=headers, timeout=30) as client:
            asset_id = client.get("/assets", params={"name_pattern": TARGET.name}).json()["assets"][0]["id"]
            rest = []
            for n in range(CALLS):
                t0 = time.perf_counter()
                client.post("/assets/events", json={"asset_id": asset_id, "extra": {"n": n}}).raise_for_status()
                rest.append(time.perf_counter() - t0)

        returned = {}
        for k in range(TRIGGERS):
            key = f"t-{k}"
            TRIGGER.emit(partition_key=key, idempotency_key=f"bench-{key}")
            returned[key] = time.time()
            time.sleep(3)
        return {"emit": _stats(emit), "rest": _stats(rest), "trigger_returned": returned}

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _psql(sql: str) -> None:
    import psycopg2

    conn = psycopg2.connect(PG_ADMIN)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := pred():
            return result
        time.sleep(0.5)
    raise TimeoutError(f"timed out waiting for {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--triggers", type=int, default=5)
    args = parser.parse_args()

    import httpx

    home = Path(tempfile.mkdtemp(prefix="bench-emit-"))
    db = f"t_emit_bench_{uuid.uuid4().hex[:8]}"
    port = _free_port()
    api = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://postgres:postgres@127.0.0.1:5432/{db}",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex * 2,
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port()),
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "BENCH_CALLS": str(args.calls),
        "BENCH_TRIGGERS": str(args.triggers),
        "BENCH_API_URL": api,
    }
    (home / "dags").mkdir()
    (home / "dags" / "bench_asset_emit.py").write_text(textwrap.dedent(BENCH_DAG))
    airflow = str(Path(sys.executable).with_name("airflow"))
    procs: list[subprocess.Popen] = []
    ok = False
    _psql(f'CREATE DATABASE "{db}"')
    try:
        subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=600)
        for name in ("api-server", "dag-processor", "scheduler"):
            log = open(home / f"{name}.log", "wb")
            procs.append(
                subprocess.Popen(
                    [airflow, name], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            )
        rest = httpx.Client(base_url=f"{api}/api/v2", timeout=30)

        def up():
            try:
                return (
                    rest.get("/dags", params={"dag_id_pattern": "bench_asset_emit"}).json()["total_entries"]
                    >= 2
                )
            except (httpx.HTTPError, KeyError, ValueError):
                return False

        _wait(up, 180, "the api-server and the benchmark Dags")
        run_id = f"bench_{uuid.uuid4().hex[:8]}"
        rest.post(
            "/dags/bench_asset_emit/dagRuns", json={"dag_run_id": run_id, "logical_date": None}
        ).raise_for_status()

        def finished():
            state = rest.get(f"/dags/bench_asset_emit/dagRuns/{run_id}").json()["state"]
            return state if state in ("success", "failed") else None

        state = _wait(finished, 1800, "the benchmark task")
        if state != "success":
            raise SystemExit(f"benchmark task {state}; see {home}/scheduler.log")
        result = rest.get(
            f"/dags/bench_asset_emit/dagRuns/{run_id}/taskInstances/bench/xcomEntries/return_value"
        ).json()["value"]

        def consumer_runs():
            runs = rest.get("/dags/bench_asset_emit_consumer/dagRuns", params={"limit": 100}).json()[
                "dag_runs"
            ]
            by_key = {r["partition_key"]: r for r in runs}
            return by_key if set(result["trigger_returned"]) <= set(by_key) else None

        by_key = _wait(consumer_runs, 120, "the consumer runs")
        lags = sorted(
            datetime.fromisoformat(by_key[key]["queued_at"]).timestamp() - returned
            for key, returned in result["trigger_returned"].items()
        )

        emit, rest_stats = result["emit"], result["rest"]
        print(f"asset.emit() benchmark: {args.calls} sequential calls from one task (same run, same asset)")
        print(f"{'':28}{'p50 ms':>10}{'p95 ms':>10}{'events/s':>12}")
        print(
            f"{'asset.emit() (Execution API)':28}{emit['p50_ms']:>10.2f}{emit['p95_ms']:>10.2f}{emit['events_per_s']:>12.1f}"
        )
        print(
            f"{'REST POST /assets/events':28}{rest_stats['p50_ms']:>10.2f}{rest_stats['p95_ms']:>10.2f}"
            f"{rest_stats['events_per_s']:>12.1f}"
        )
        print(
            f"ratio emit/REST: p50 {emit['p50_ms'] / rest_stats['p50_ms']:.2f}x, "
            f"p95 {emit['p95_ms'] / rest_stats['p95_ms']:.2f}x, "
            f"throughput {emit['events_per_s'] / rest_stats['events_per_s']:.2f}x"
        )
        print(
            f"emit() returned -> consumer Dag run queued ({len(lags)} samples): "
            f"p50 {1000 * statistics.median(lags):.0f} ms, max {1000 * lags[-1]:.0f} ms"
        )
        print(json.dumps({"emit": emit, "rest": rest_stats, "trigger_lag_s": lags}))
        ok = True
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        _psql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        if ok:
            shutil.rmtree(home, ignore_errors=True)
        else:
            print(f"logs kept in {home}", file=sys.stderr)


if __name__ == "__main__":
    main()
