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
* the user retries spent: ``try_number - 1 - infra_retry_count`` of the finished task instance;
* the breakdown of that time (issue 39), from timestamps of one run: the container's start (the
  restart command to the engine's ``State.StartedAt``), the entrypoint's wait for the database
  (``StartedAt`` to the entrypoint's "the metadata database answered" line), the worker's boot (to
  Celery's ``ready.`` line; the patched worker announces its incarnation, ``Announced Celery
  worker``, at ``worker_init``, before that), the detection of the new incarnation (the
  announcement to try 1's ``end_date``; for the unpatched side, which announces nothing, from
  ``ready.``: the heartbeat timeout), the retry delay (try 1's ``end_date`` to try 2's ``scheduled_when``: the granted delay,
  ``retry_delay=`` of the scheduler's decision line, plus the scheduler's next pass), queueing (to
  ``queued_when``), the worker's pick-up and the task's start (to try 2's ``start_date``, the
  Execution API's ``run`` call, and to the task's own code). The container-log timestamps are the
  engine's (``logs --timestamps``), the others the database's; all on this machine's clock.

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
import re
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
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

#: The container-log lines that mark the steps of the worker's restart (the first after the restart).
MARKS = {
    "db_answered": "the metadata database answered",  # docker/standin/entrypoint
    "announced": "Announced Celery worker",  # the patched worker, at worker_init
    "ready": " ready.",  # Celery's worker_ready line: "celery@worker-1 ready."
}
#: The steps of the breakdown: (label, from, to); the marks are epoch seconds.
STEPS = (
    ("container start", "restart", "container_started"),
    ("entrypoint: wait for the database", "container_started", "db_answered"),
    ("worker boot (to ready; it announces itself before)", "db_answered", "ready"),
    ("detection (announcement, else ready, to try 1 failed)", "detected_from", "try1_ended"),
    ("retry delay + scheduler pass (to scheduled)", "try1_ended", "try2_scheduled"),
    ("queueing (to queued)", "try2_scheduled", "try2_queued"),
    ("worker pick-up, supervisor (to start_date)", "try2_queued", "try2_started"),
    ("task start (to the task's code)", "try2_started", "try2_running"),
)


def parse_time(text: str) -> float:
    """Epoch seconds of an engine or API timestamp (RFC 3339 with nanoseconds, or podman's inspect form)."""
    m = re.match(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:\.(\d+))?\s*(Z|[+-]\d\d:?\d\d)?", text.strip())
    if not m:
        raise ValueError(f"not a timestamp: {text!r}")
    day, clock, fraction, zone = m.groups()
    stamp = datetime.fromisoformat(f"{day}T{clock}").replace(tzinfo=UTC).timestamp()
    if zone and zone not in ("Z", "+00:00", "+0000"):
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        stamp -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return stamp + (float(f"0.{fraction}") if fraction else 0.0)


def log_marks(engine, container: str, since: float) -> dict[str, float]:
    """The first time each of :data:`MARKS` appears in the container's log after ``since``."""
    proc = engine.run("logs", "--timestamps", container, check=False)
    found: dict[str, float] = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        stamp, _, text = line.partition(" ")
        try:
            at = parse_time(stamp)
        except ValueError:
            continue
        if at < since:
            continue
        for mark, needle in MARKS.items():
            if mark not in found and needle in text:
                found[mark] = at
    return found


def decided_delay(engine, container: str) -> str:
    """The ``retry_delay=`` of the scheduler's last infrastructure retry decision, or ``-``."""
    proc = engine.run("logs", container, check=False)
    delays = re.findall(
        r"Infrastructure retry decision: infra_retry=granted.*? retry_delay=([0-9.]+)",
        proc.stdout + proc.stderr,
    )
    return delays[-1] if delays else "-"


def measure(engine, image: str, extra_env: dict[str, str], timeout: float, label: str) -> dict:
    """Deploy ``image``, lose and restart the worker container under try 1, return the figures."""
    with (
        TemporaryDirectory(prefix=f"celery_ctr_bench_{label}_") as tmp,
        harness.pg_database(f"t_ctr_bench_{label}") as url,
    ):
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
            with Deployment(
                engine, image, env, home=home / "deployment", dags=[home / "dag.py"], name=name
            ) as dep:
                dep.migrate()
                for component in ("api-server", "dag-processor", "scheduler"):
                    dep.start(component)
                dep.start_worker("worker-1", concurrency=1)
                dep.wait_api()
                dep.wait_parsed([DAG_ID])
                run_id = dep.trigger(DAG_ID)
                out = dep.dir["out"]
                harness.wait_for(
                    lambda: any(e["try_number"] == 1 for e in events(out)),
                    timeout=300,
                    what=f"{label}: try 1",
                )
                time.sleep(2)
                dep.kill("worker-1")
                restarted = dep.restart("worker-1")
                container_started = parse_time(
                    engine.run(
                        "inspect", "--format", "{{.State.StartedAt}}", dep.container("worker-1")
                    ).stdout
                )
                harness.wait_for(
                    lambda: any(e["try_number"] == 2 for e in events(out)),
                    timeout=timeout,
                    interval=1,
                    what=f"{label}: try 2",
                )
                harness.wait_for(
                    lambda: dep.run_state(DAG_ID, run_id) in ("success", "failed"),
                    timeout=120,
                    what=f"{label}: run finished",
                )
                tries = dep.tries(DAG_ID, run_id, "hold")
                marks = log_marks(engine, dep.container("worker-1"), restarted)
                delay = decided_delay(engine, dep.container("scheduler"))
        second = next(e["started"] for e in events(out) if e["try_number"] == 2)
    final = tries[-1]
    infra = final.get("infra_retry_count") or 0
    marks.update(
        restart=restarted,
        container_started=container_started,
        try1_ended=parse_time(tries[0]["end_date"]),
        try2_scheduled=parse_time(final["scheduled_when"]),
        try2_queued=parse_time(final["queued_when"]),
        try2_started=parse_time(final["start_date"]),
        try2_running=second,
    )
    # The patched worker's earliest signal is its announcement (worker_init, before ready); the
    # unpatched one has none, and its try is ended by the heartbeat timeout, timed from ready.
    if "announced" in marks or "ready" in marks:
        marks["detected_from"] = marks.get("announced", marks.get("ready"))
    return {
        "marks": marks,
        "decided_delay": delay,
        "recovery_s": second - restarted,
        "state": final["state"],
        "try_number": final["try_number"],
        "user_retries_spent": final["try_number"] - 1 - infra,
        "infra_retry_count": final.get("infra_retry_count", "-"),
        "try1_cause": tries[0].get("failure_cause", "-"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
            print(
                f"{label}: try 2 running {results[label]['recovery_s']:.1f} s after the restart", flush=True
            )
        except BaseException as err:
            results[label] = err

    threads = [threading.Thread(target=side, args=(label,)) for label in sides]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(
        f"\n{'side':<10} {'image':<42} {'restart -> try 2 running':>25} {'user retries spent':>19}  try 1 cause, final"
    )
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
    print_breakdown(results)
    if not isinstance(results.get("unpatched"), (dict,)) or not isinstance(results.get("patched"), dict):
        return status
    print(
        f"ratio unpatched/patched: {results['unpatched']['recovery_s'] / results['patched']['recovery_s']:.1f}x"
    )
    return status


def print_breakdown(results: dict[str, dict | BaseException]) -> None:
    """The steps from the restart to try 2's code, per side, in seconds."""
    sides = [label for label, result in results.items() if isinstance(result, dict)]
    if not sides:
        return
    print(f"\n{'breakdown (s)':<50}" + "".join(f"{label:>12}" for label in sides))
    for label, start, end in STEPS:
        cells = []
        for side in sides:
            marks = results[side]["marks"]
            cells.append(
                f"{marks[end] - marks[start]:>12.1f}" if start in marks and end in marks else f"{'-':>12}"
            )
        print(f"{label:<50}" + "".join(cells))
    for label, start, end in (
        ("restart to try 2 running", "restart", "try2_running"),
        ("ready to try 2 running (target <= 10 s)", "ready", "try2_running"),
        ("announced to try 1 failed (target <= 5 s)", "announced", "try1_ended"),
    ):
        cells = []
        for side in sides:
            marks = results[side]["marks"]
            cells.append(
                f"{marks[end] - marks[start]:>12.1f}" if start in marks and end in marks else f"{'-':>12}"
            )
        print(f"{label:<50}" + "".join(cells))
    print(
        f"{'granted infra retry delay (decision line)':<50}"
        + "".join(f"{results[s]['decided_delay']:>12}" for s in sides)
    )


if __name__ == "__main__":
    sys.exit(main())
