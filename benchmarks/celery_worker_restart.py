#!/usr/bin/env python
"""
Benchmark (issue 14): time from a lost Celery worker's restart to the next try running.

A task with ``retries=1`` runs on a Celery worker with a fixed node name (``--celery-hostname``).
While its first try runs, the worker's whole process group is SIGKILLed (a killed container) and a
worker with the same node name is started at once. The figure is the time from that restart (the
instant the new worker process is started) until the second try's code is running (written by the
task itself); with it, the time from the restart until try 1 was recorded failed (how fast the
executor's restart evidence ends a lost try: ``tests/providers/test_celery_worker_restart_e2e.py``
checks that it is that evidence, this says how fast).

* patched: this repository's Airflow and celery provider with ``[core] max_infra_retries=1`` and
  every other setting at its default (``infra_retry_delay`` 5 s, ``task_instance_heartbeat_timeout``
  300 s). The executor sees the worker's new incarnation (its start announcement; checked every 5 s),
  fails try 1 as ``infra``, and the retry does not spend the task's ``retries``.
* unpatched: Airflow 3.3.2 with the celery provider 3.26.0 and upstream defaults. Nothing reports
  the lost try; it stays ``running`` until the heartbeat timeout (``task_instance_heartbeat_timeout``
  300 s after its last heartbeat, checked every 10 s), spends its retry and waits ``retry_delay``
  (300 s).

Both run on the same machine, one after the other, each with its own PostgreSQL database, its own
``redis-server`` (broker and result backend), api-server, dag-processor, scheduler (CeleryExecutor)
and worker. The unpatched run takes about ten minutes; its venv is ``tests/harness.py``
``unpatched_venv(providers=True)``: the line's unpatched release with every pinned provider.

Usage::

    .venv/bin/python benchmarks/celery_worker_restart.py [--skip-unpatched]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import harness  # noqa: E402
from _lost_try import dag_file, events, outcome  # noqa: E402

DAG_ID = "celery_worker_restart_bench"
NODE = "bench-node"
#: The task holds its first try until its worker is killed.
DAG_FILE = dag_file(DAG_ID, "hold", "CELERY_BENCH_OUT", "time.sleep(3600)")


def unpatched_celery_venv() -> Path:
    """The line's unpatched release with every pinned, unpatched provider (celery among them)."""
    return harness.unpatched_venv(providers=True)


def measure(venv: Path, extra_env: dict[str, str], timeout: float, label: str) -> dict:
    """Run the Dag once on a fresh Celery stack; return the restart-to-next-try time and the TI."""
    with TemporaryDirectory(prefix=f"celery_bench_{label}_") as tmp:
        stack = harness.Stack(
            f"t_celery_bench_{label}",
            Path(tmp) / "home",
            venv=venv,
            executor="CeleryExecutor",  # and a private redis-server as broker and result backend
            # Upstream's defaults (but quick Dag discovery), so that only the patches differ.
            tuned=False,
            config={
                "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                **extra_env,
            },
            out_var="CELERY_BENCH_OUT",
        )
        (stack.dags_folder / f"{DAG_ID}.py").write_text(DAG_FILE)
        with stack:
            stack.start_worker("worker-1", "--celery-hostname", NODE)
            stack.trigger(DAG_ID)
            stack.wait_for(
                lambda: any(e["try_number"] == 1 for e in events(stack.out)),
                timeout=180,
                interval=0.5,
                what=f"{label}: try 1 running",
            )
            time.sleep(2)
            first = stack.env.procs["worker-1"]
            os.killpg(first.pid, signal.SIGKILL)  # the whole worker, as a killed container
            first.wait(timeout=10)
            restarted = time.time()
            stack.start_worker("worker-2", "--celery-hostname", NODE)
            stack.wait_for(
                lambda: any(e["try_number"] == 2 for e in events(stack.out)),
                timeout=timeout,
                interval=1,
                what=f"{label}: try 2 running",
            )
            ti = outcome(stack, DAG_ID)
        recorded = events(stack.out)
    second = next(e["started"] for e in recorded if e["try_number"] == 2)
    return {"recovery_s": second - restarted, "detected_s": ti.pop("try1_ended") - restarted, **ti}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--skip-unpatched", action="store_true", help="only measure the patched build")
    parser.add_argument("--unpatched-timeout", type=float, default=1200)
    args = parser.parse_args()
    if not harness.pg_available():
        print(harness.PG_UNREACHABLE, file=sys.stderr)
        return 1

    patched = measure(Path(sys.prefix), {"AIRFLOW__CORE__MAX_INFRA_RETRIES": "1"}, 300, "patched")
    print(
        "patched   (max_infra_retries=1; heartbeat timeout 300 s, infra_retry_delay 5 s, retry_delay 300 s): "
        f"try 1 failed {patched['detected_s']:6.1f} s and the "
        f"next try running {patched['recovery_s']:6.1f} s after the restart; try 1 cause "
        f"{patched['try1_cause']}; final state {patched['state']}, try_number={patched['try_number']} "
        f"max_tries={patched['max_tries']} infra_retry_count={patched['infra_retry_count']} (retries=1 left unspent)",
        flush=True,
    )
    if args.skip_unpatched:
        return 0
    venv = unpatched_celery_venv()
    unpatched = measure(venv, {}, args.unpatched_timeout, "unpatched")
    print(
        "unpatched (3.3.2 + celery 3.26.0, upstream defaults: heartbeat timeout 300 s, retry_delay 300 s): "
        f"try 1 failed {unpatched['detected_s']:6.1f} s and the "
        f"next try running {unpatched['recovery_s']:6.1f} s after the restart; final state "
        f"{unpatched['state']}, try_number={unpatched['try_number']} max_tries={unpatched['max_tries']} "
        "(its retry spent)",
        flush=True,
    )
    print(f"ratio unpatched/patched: {unpatched['recovery_s'] / patched['recovery_s']:.1f}x faster recovery")
    return 0


if __name__ == "__main__":
    sys.exit(main())
