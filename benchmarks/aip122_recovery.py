#!/usr/bin/env python
"""
Benchmark: time to recover from a worker killed mid-task (AIP-122 Infrastructure Retries).

A task with ``retries=1`` SIGKILLs its LocalExecutor worker (its supervisor) and itself on its first
try, as when the node under it is lost; its second try succeeds. The figure is the time from the kill
until the second try's code is running (both instants written by the task itself).

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
import json
import sys
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import harness  # noqa: E402

DAG_ID = "aip122_recovery"
DAG_FILE = f'''
import json, os, signal, time
from datetime import datetime
from airflow.sdk import DAG, task

OUT = os.environ["AIP122_BENCH_OUT"]

with DAG("{DAG_ID}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=1)
    def lose_worker_once(ti=None):
        now = time.time()
        with open(os.path.join(OUT, "events.jsonl"), "a") as f:
            f.write(json.dumps({{"try_number": ti.try_number, "started": now}}) + "\\n")
        if ti.try_number == 1:
            time.sleep(2)
            with open(os.path.join(OUT, "events.jsonl"), "a") as f:
                f.write(json.dumps({{"try_number": 1, "killed": time.time()}}) + "\\n")
            os.kill(os.getppid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        return "ok"

    lose_worker_once()
'''


def _events(out: Path) -> list[dict]:
    path = out / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def measure(venv: Path, extra_env: dict[str, str], timeout: float, label: str) -> dict:
    """Run the Dag once in a fresh stack; return the recovery time and the task instance's counters."""
    with (
        TemporaryDirectory(prefix=f"aip122_bench_{label}_") as tmp,
        harness.pg_database(f"t_aip122_bench_{label}") as url,
    ):
        home = Path(tmp)
        out = home / "out"
        out.mkdir()
        port = harness.free_port()
        env = harness.AirflowEnv(
            venv,
            home / "home",
            db_url=url,
            extra_env={
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API_AUTH__JWT_SECRET": "aip122-bench-" + uuid.uuid4().hex,
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIP122_BENCH_OUT": str(out),
                **extra_env,
            },
        )
        (env.dags_folder / "aip122_recovery.py").write_text(DAG_FILE)
        with env:
            env.airflow("db", "migrate", timeout=300)
            env.start("api-server")
            env.start("dag-processor")
            env.start("scheduler")
            harness.wait_for(
                lambda: env.airflow("dags", "list", "-o", "json", check=False).stdout.count(DAG_ID),
                timeout=120,
                interval=2,
                what="the Dag to be parsed",
            )
            env.airflow("dags", "unpause", DAG_ID)
            env.airflow("dags", "trigger", DAG_ID)

            def second_try_running():
                return any(e.get("try_number") == 2 and "started" in e for e in _events(out))

            harness.wait_for(second_try_running, timeout=timeout, interval=1, what=f"{label}: try 2 running")
            time.sleep(3)  # let try 2 finish and the scheduler record it
            code = (
                "from airflow.utils.session import create_session\n"
                "from airflow.models.taskinstance import TaskInstance as TI\n"
                "import json\n"
                "with create_session() as s:\n"
                f"    ti = s.query(TI).filter(TI.dag_id == '{DAG_ID}').one()\n"
                "    print(json.dumps({'state': str(ti.state), 'try_number': ti.try_number,"
                " 'max_tries': ti.max_tries, 'infra_retry_count': getattr(ti, 'infra_retry_count', None)}))\n"
            )
            ti = json.loads(env.run_python(code).stdout.strip().splitlines()[-1])
        events = _events(out)
    killed = next(e["killed"] for e in events if "killed" in e)
    restarted = next(e["started"] for e in events if e.get("try_number") == 2 and "started" in e)
    return {"recovery_s": restarted - killed, **ti}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--unpatched-venv", type=Path, default=None)
    parser.add_argument("--skip-unpatched", action="store_true", help="only measure the patched build")
    parser.add_argument("--unpatched-timeout", type=float, default=1200)
    args = parser.parse_args()
    if not harness.pg_available():
        print("PostgreSQL at 127.0.0.1:5432 is not reachable; run .ci/services.sh", file=sys.stderr)
        return 1

    patched = measure(Path(sys.prefix), {"AIRFLOW__CORE__MAX_INFRA_RETRIES": "1"}, 180, "patched")
    print(
        f"patched   (max_infra_retries=1, infra_retry_delay default): next try running "
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
        f"unpatched (3.3.2, retries=1, upstream defaults):            next try running "
        f"{unpatched['recovery_s']:6.1f} s after the kill; final state {unpatched['state']}, "
        f"try_number={unpatched['try_number']} max_tries={unpatched['max_tries']} (its retry spent)",
        flush=True,
    )
    print(f"ratio unpatched/patched: {unpatched['recovery_s'] / patched['recovery_s']:.1f}x faster recovery")
    return 0


if __name__ == "__main__":
    sys.exit(main())
