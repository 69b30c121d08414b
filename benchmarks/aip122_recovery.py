#!/usr/bin/env python
"""
Benchmark: time to recover from a worker killed mid-task (AIP-122 Infrastructure Retries).

A task with ``retries=1`` SIGKILLs its LocalExecutor worker (its supervisor) and itself on its first
try, as when the node under it is lost; its second try succeeds. The figure is the time from the kill
until the second try's code is running (both instants written by the task itself); with it, the
time from the kill until try 1 was recorded failed (how fast the LocalExecutor reports a lost worker:
``tests/aip97_worker`` checks that it is the LocalExecutor's report, this says how fast).

* patched: this repository's Airflow with ``[core] max_infra_retries=1`` and every other setting at
  its default (``infra_retry_delay`` 5 s). The LocalExecutor reports the dead worker at once with the
  cause ``infra`` and the retry does not spend the task's ``retries``.
* unpatched: Airflow 3.3.2 with upstream defaults. Nothing reports the dead worker; the task
  instance stays ``running`` until the heartbeat timeout (``task_instance_heartbeat_timeout`` 300 s,
  checked every 10 s), then it spends its retry and waits ``retry_delay`` (300 s).

Both run on the same machine, one after the other, each with its own PostgreSQL database, api-server,
dag-processor and scheduler (LocalExecutor). The unpatched run takes about ten minutes.

Usage::

    .venv/bin/python benchmarks/aip122_recovery.py [--unpatched-venv PATH] [--skip-unpatched]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from tempfile import TemporaryDirectory

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import harness  # noqa: E402
from _lost_try import dag_file, events, outcome  # noqa: E402

DAG_ID = "aip122_recovery"
#: The task SIGKILLs its worker (its supervisor) and itself on try 1, two seconds after it started.
DAG_FILE = dag_file(
    DAG_ID,
    "lose_worker_once",
    "AIP122_BENCH_OUT",
    """
    time.sleep(2)
    record({"try_number": 1, "killed": time.time()})
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
    """,
)


def measure(venv: Path, extra_env: dict[str, str], timeout: float, label: str) -> dict:
    """Run the Dag once in a fresh stack; return the recovery time and the task instance's counters."""
    with TemporaryDirectory(prefix=f"aip122_bench_{label}_") as tmp:
        stack = harness.Stack(
            f"t_aip122_bench_{label}",
            Path(tmp) / "home",
            venv=venv,
            # Upstream's defaults (but quick Dag discovery), so that only the patches differ.
            tuned=False,
            config={
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                **extra_env,
            },
            out_var="AIP122_BENCH_OUT",
        )
        (stack.dags_folder / "aip122_recovery.py").write_text(DAG_FILE)
        with stack:
            stack.trigger(DAG_ID)

            def second_try_running():
                return any(e.get("try_number") == 2 and "started" in e for e in events(stack.out))

            stack.wait_for(second_try_running, timeout=timeout, interval=1, what=f"{label}: try 2 running")
            ti = outcome(stack, DAG_ID)
        recorded = events(stack.out)
    killed = next(e["killed"] for e in recorded if "killed" in e)
    restarted = next(e["started"] for e in recorded if e.get("try_number") == 2 and "started" in e)
    return {"recovery_s": restarted - killed, "detected_s": ti.pop("try1_ended") - killed, **ti}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--unpatched-venv", type=Path, default=None)
    parser.add_argument("--skip-unpatched", action="store_true", help="only measure the patched build")
    parser.add_argument("--unpatched-timeout", type=float, default=1200)
    args = parser.parse_args()
    if not harness.pg_available():
        print(harness.PG_UNREACHABLE, file=sys.stderr)
        return 1

    patched = measure(Path(sys.prefix), {"AIRFLOW__CORE__MAX_INFRA_RETRIES": "1"}, 180, "patched")
    print(
        f"patched   (max_infra_retries=1, infra_retry_delay default): try 1 failed "
        f"{patched['detected_s']:6.1f} s after the kill (by the LocalExecutor); next try running "
        f"{patched['recovery_s']:6.1f} s after the kill; final state {patched['state']}, "
        f"try_number={patched['try_number']} max_tries={patched['max_tries']} "
        f"infra_retry_count={patched['infra_retry_count']} (retries=1 left unspent)",
        flush=True,
    )
    if args.skip_unpatched:
        return 0
    venv = harness.unpatched_venv(args.unpatched_venv)
    unpatched = measure(venv, {}, args.unpatched_timeout, "unpatched")
    print(
        f"unpatched (3.3.2, retries=1, upstream defaults):            try 1 failed "
        f"{unpatched['detected_s']:6.1f} s after the kill (heartbeat timeout); next try running "
        f"{unpatched['recovery_s']:6.1f} s after the kill; final state {unpatched['state']}, "
        f"try_number={unpatched['try_number']} max_tries={unpatched['max_tries']} (its retry spent)",
        flush=True,
    )
    print(f"ratio unpatched/patched: {unpatched['recovery_s'] / patched['recovery_s']:.1f}x faster recovery")
    return 0


if __name__ == "__main__":
    sys.exit(main())
