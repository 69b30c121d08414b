#!/usr/bin/env python
"""
Benchmark (issue 24): a Celery worker *container* killed and restarted; the patched image against the
unpatched stand-in, side by side in one run.

The container sibling of benchmarks/celery_worker_restart.py, with the same Dag (a task with
``retries=1`` whose first try sleeps until its worker is lost). Each side is a deployment of one
image, one container per component (tests/image/deployment.py): api-server, Dag processor, scheduler
(CeleryExecutor) and a Celery worker started with ``--hostname worker-1``, on its own PostgreSQL
database and its own ``redis-server`` (broker and result backend). While try 1 runs, the worker's
container is killed (``kill --signal KILL``) and started again at once (``start``: same container,
host name and node name ``celery@worker-1``, a new process, whose entrypoint first waits for the
database as the official one does). The figures, per side:

* the time from the restart (``start``) to try 2's code running (written by the task itself);
* the user retries spent: ``try_number - 1 - infra_retry_count`` of the finished task instance.

Sides:

* patched: ``airflow-patchset:<release>-<label>`` on the stand-in (``make image
  BASE=localhost/airflow-standin:<release>``) with ``[core] max_infra_retries = 1`` and every other
  setting at upstream's default (``infra_retry_delay`` 5 s, ``task_instance_heartbeat_timeout`` 300 s,
  ``retry_delay`` 300 s). The executor sees the node's new incarnation and fails try 1 as ``infra``; the
  retry is an infra retry.
* unpatched: the stand-in itself, ``localhost/airflow-standin:<release>`` (upstream's wheels), with
  upstream defaults: try 1 stays ``running`` until the heartbeat timeout, spends the task's retry and
  waits ``retry_delay``: about ten minutes.

Both deployments run at the same time on this machine (their own ports, databases and brokers), so
the patched figure includes the load of the unpatched side's start-up. The images are built (or found
cached) first, with ``make base-image`` / ``make image``'s code.

Usage::

    .venv/bin/python benchmarks/celery_worker_restart_containers.py [--skip-unpatched]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "image"))
sys.path.insert(0, str(REPO / "dev"))
sys.path.insert(0, str(REPO / "benchmarks"))

import harness  # noqa: E402
from _lost_try import events  # noqa: E402
from celery_worker_restart import DAG_FILE, DAG_ID  # noqa: E402
from deployment import OUT, Deployment  # noqa: E402


def measure(engine, image: str, extra_env: dict[str, str], timeout: float, label: str) -> dict:
    """Deploy ``image``, lose and restart the worker container under try 1, return the figures."""
    with TemporaryDirectory(prefix=f"celery_ctr_bench_{label}_") as tmp, harness.pg_database(f"t_ctr_bench_{label}") as url:
        home = Path(tmp)
        (home / "dag.py").write_text(DAG_FILE)
        with harness.private_redis(home / "redis") as redis_port:
            broker = f"redis://127.0.0.1:{redis_port}/0"
            env = {
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__CELERY__BROKER_URL": broker,
                "AIRFLOW__CELERY__RESULT_BACKEND": broker,
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "CELERY_BENCH_OUT": OUT,
                **extra_env,
            }
            name = f"aps-bench-{label}-{uuid.uuid4().hex[:6]}"
            with Deployment(engine, image, env, home=home / "deployment", dags=[home / "dag.py"], name=name) as dep:
                dep.migrate()
                for component in ("api-server", "dag-processor", "scheduler"):
                    dep.start(component)
                dep.start_worker("worker-1", concurrency=1)
                dep.wait_api()
                dep.wait_parsed([DAG_ID])
                run_id = dep.trigger(DAG_ID)
                out = dep.dir["out"]
                harness.wait_for(lambda: any(e["try_number"] == 1 for e in events(out)), timeout=300, what=f"{label}: try 1")
                time.sleep(2)
                dep.kill("worker-1")
                restarted = dep.restart("worker-1")
                harness.wait_for(
                    lambda: any(e["try_number"] == 2 for e in events(out)), timeout=timeout, interval=1, what=f"{label}: try 2"
                )
                harness.wait_for(
                    lambda: dep.run_state(DAG_ID, run_id) in ("success", "failed"), timeout=120, what=f"{label}: run finished"
                )
                tries = dep.tries(DAG_ID, run_id, "hold")
        second = next(e["started"] for e in events(out) if e["try_number"] == 2)
    final = tries[-1]
    infra = final.get("infra_retry_count") or 0
    return {
        "recovery_s": second - restarted,
        "state": final["state"],
        "try_number": final["try_number"],
        "user_retries_spent": final["try_number"] - 1 - infra,
        "infra_retry_count": final.get("infra_retry_count", "-"),
        "try1_cause": tries[0].get("failure_cause", "-"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-unpatched", action="store_true", help="only measure the patched image")
    parser.add_argument("--unpatched-timeout", type=float, default=1200)
    args = parser.parse_args()
    if not harness.pg_available():
        print(harness.PG_UNREACHABLE, file=sys.stderr)
        return 1
    from pstool.image import base_image, detect_engine, image

    engine = detect_engine()
    standin = base_image(engine=engine)
    patched = image(base=standin, engine=engine, build_wheels=False)

    sides = {"patched": (patched, {"AIRFLOW__CORE__MAX_INFRA_RETRIES": "1"}, 300.0)}
    if not args.skip_unpatched:
        sides["unpatched"] = (standin, {}, args.unpatched_timeout)
    results: dict[str, dict | BaseException] = {}

    def side(label: str) -> None:
        image_tag, env, timeout = sides[label]
        try:
            results[label] = measure(engine, image_tag, env, timeout, label)
        except BaseException as err:  # noqa: BLE001 - reported below
            results[label] = err

    threads = [threading.Thread(target=side, args=(label,)) for label in sides]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"\n{'side':<10} {'image':<42} {'restart -> try 2 running':>25} {'user retries spent':>19}  try 1 cause, final")
    status = 0
    for label, (image_tag, _env, _timeout) in sides.items():
        result = results[label]
        if isinstance(result, BaseException):
            print(f"{label:<10} {image_tag:<42} failed: {result!r}")
            status = 1
            continue
        print(
            f"{label:<10} {image_tag:<42} {result['recovery_s']:>23.1f} s {result['user_retries_spent']:>19}  "
            f"{result['try1_cause'] or '-'}, {result['state']} on try {result['try_number']} "
            f"(infra_retry_count {result['infra_retry_count']})"
        )
    if not isinstance(results.get("unpatched"), (dict,)) or not isinstance(results.get("patched"), dict):
        return status
    print(f"ratio unpatched/patched: {results['unpatched']['recovery_s'] / results['patched']['recovery_s']:.1f}x")
    return status


if __name__ == "__main__":
    sys.exit(main())
