"""The patched image run as a deployment runs it, one container per component (tests/image/deployment.py).

One deployment for the module, from the patched image on this line's stand-in base: ``airflow db
migrate``, then the api-server, scheduler (CeleryExecutor), Dag processor and triggerer, each in its
own container on the PostgreSQL of .ci/services.sh (a database of its own) and a ``redis-server`` of its
own on the host (``harness.private_redis``), and two Celery workers
in containers started with ``--hostname worker-1`` / ``--hostname worker-2``, whose Celery node names
are therefore ``celery@worker-1`` / ``celery@worker-2`` (the aip-97-celery restart detection keys on
the node name; the test reads worker-1's announcement under that name). ``[core] max_infra_retries``
is 1; ``[scheduler] task_instance_heartbeat_timeout`` is 60 s, so that the heartbeat path ends a lost
try within the test but never before the executor had its chance.

* the example Dags of every feature (examples/dags): each AIP-97 cause recorded and shown over REST,
  ``asset.emit()`` with its consumer runs, an AIP-122 infra retry granted;
* the real lost-worker scenario: worker-1's container is SIGKILLed (``kill --signal KILL``: its init,
  so every process in it) while a try runs, then ``start``ed again (same container, same host name, a
  new process). Try 1 is failed as ``infra`` on the restart evidence (the reason names the node and
  both incarnations) and retried, and with ``retries=0`` succeeds on try 2. The task appends a record
  every 50 ms to a host directory: its records run up to the kill and none follows it, so nothing of
  the killed try ran after the kill (its processes were gone, as the engine reported the container
  stopped). The time from the restart to try 2 running is printed (benchmarks/ compares it with the
  unpatched stand-in);
* worker-2 is killed while its try runs (on its own queue) and never restarted: the try stays
  ``running`` until the heartbeat timeout, which ends it as ``unknown``. It is killed when the module
  starts, so its heartbeat timeout runs out while the other scenarios run.

On a line other than the default one only the restart scenario runs (see ``default_line_only``).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests"))

from deployment import Deployment  # noqa: E402
from harness import free_port, pg_database, private_redis, require_postgres, wait_for  # noqa: E402

import lines  # noqa: E402

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.requires_feature("asset-emit", "aip-97", "aip-97-celery", "aip-122"),
]

HEARTBEAT_TIMEOUT = 60
HOLD_DAG = REPO / "tests" / "providers" / "dags" / "aip97_celery_worker_restart.py"
W1_DAG, W2_DAG = "aip97_celery_worker_restart", "aip97_celery_worker_restart_w2"
EXAMPLES = ["aip97_failure_causes", "aip122_infra_retry", "asset_emit_ingestion"]
BATCHES = [f"batch-{n:04d}" for n in range(1, 6)]
TERMINAL = {"success", "failed"}

#: On the other lines the deployment runs the lost-worker restart only: the example Dags and the
#: heartbeat path run on every line in tests/demo and tests/providers (processes, no containers), and
#: what containers add (the image, its entrypoint, host names, a restarted container's pid) is the
#: same on every line. CI's time is shared by both lines.
default_line_only = pytest.mark.skipif(
    lines.LINE != lines.DEFAULT_LINE,
    reason="on the default line only: the example Dags and the heartbeat path run on every line in tests/demo "
    "and tests/providers; here, the container restart",
)


@pytest.fixture(scope="module")
def redis_db(tmp_path_factory):
    """The deployment's broker and result backend: a ``redis-server`` of its own on the host (``--network=host``)."""
    import redis

    with private_redis(tmp_path_factory.mktemp("redis")) as port:
        client = redis.Redis(host="127.0.0.1", port=port)
        yield client
        client.close()


@pytest.fixture(scope="module")
def deployment(engine, patched, redis_db, tmp_path_factory):
    require_postgres()
    broker = f"redis://127.0.0.1:{redis_db.connection_pool.connection_kwargs['port']}/0"
    started = time.monotonic()
    with pg_database("t_image") as db_url:
        env = {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": broker,
            "AIRFLOW__CELERY__RESULT_BACKEND": broker,
            "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",
            "AIRFLOW__CORE__MAX_INFRA_RETRIES": "1",
            "AIRFLOW__CORE__INFRA_RETRY_DELAY": "2",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT),
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIP97CEL_OUT": "/out",
            "AIP97CEL_QUEUES": "default,w2",
        }
        dags = [*sorted((REPO / "examples" / "dags").glob("*.py")), HOLD_DAG]
        name = f"aps-image-{lines.LINE.replace('.', '')}-{uuid.uuid4().hex[:6]}"
        with Deployment(engine, patched, env, home=tmp_path_factory.mktemp("deployment"), dags=dags, name=name) as dep:
            try:
                dep.migrate()
                for component in ("api-server", "scheduler", "dag-processor", "triggerer"):
                    dep.start(component)
                dep.start_worker("worker-1", concurrency=4)
                dep.wait_api()
                dep.wait_parsed([*EXAMPLES, "asset_emit_batch_consumer", W1_DAG, W2_DAG])
            except Exception:
                dep.dump_logs()
                raise
            print(f"deployment up in {time.monotonic() - started:.0f}s")
            yield dep


def wait_running(dep: Deployment, run_id: str, try_number: int = 1, timeout: float = 180) -> None:
    wait_for(
        lambda: any(r["try"] == try_number and r.get("start") for r in dep.records(run_id)),
        timeout=timeout,
        interval=0.5,
        what=f"try {try_number} of {run_id} running",
    )


@pytest.fixture(scope="module")
def worker_2_lost(deployment):
    """worker-2's container killed under a running try, before the other scenarios; never restarted."""
    deployment.start_worker("worker-2", queues="w2", concurrency=1)
    run_id = deployment.trigger(W2_DAG)
    try:
        wait_running(deployment, run_id)
    except TimeoutError:
        deployment.dump_logs("scheduler", "worker-2")
        raise
    time.sleep(1)
    return {"run_id": run_id, "killed_at": deployment.kill("worker-2")}


def wait_runs(dep: Deployment, runs: dict[str, str], timeout: float) -> None:
    try:
        wait_for(
            lambda: all(dep.run_state(dag_id, run_id) in TERMINAL for dag_id, run_id in runs.items()),
            timeout=timeout,
            interval=2,
            what=f"the runs of {', '.join(runs)} to finish",
        )
    except TimeoutError:
        dep.dump_logs("scheduler", "worker-1")
        raise


def summary(tries: list[dict]) -> list[tuple]:
    return [(t["try_number"], t["state"], t["failure_cause"]) for t in tries]


@default_line_only
@pytest.mark.timeout(900)
def test_example_dags_of_every_feature(deployment, worker_2_lost):
    dep = deployment
    runs = {dag_id: dep.trigger(dag_id) for dag_id in EXAMPLES}
    wait_runs(dep, runs, timeout=360)

    # AIP-97: one cause per way of failing, recorded per try and shown by the REST API.
    tries = {task: dep.tries("aip97_failure_causes", runs["aip97_failure_causes"], task) for task in ("raises", "times_out", "worker_lost")}
    assert summary(tries["raises"]) == [(1, "failed", "application")]
    assert tries["raises"][0]["failure_reason"].startswith("ValueError: the input file has no header row")
    assert summary(tries["times_out"]) == [(1, "failed", "timeout")]
    assert summary(tries["worker_lost"]) == [(1, "failed", "infra"), (2, "success", None)]
    assert tries["worker_lost"][0]["failure_reason"].startswith("Celery worker child process lost")

    # AIP-122: the lost worker is retried without spending the task's retries (it has none).
    lose = dep.tries("aip122_infra_retry", runs["aip122_infra_retry"], "lose_worker_once")
    assert summary(lose) == [(1, "failed", "infra"), (2, "success", None)]
    assert lose[-1]["infra_retry_count"] == 1
    opt_out = dep.tries("aip122_infra_retry", runs["aip122_infra_retry"], "not_safe_to_rerun")
    assert summary(opt_out) == [(1, "failed", "infra")] and opt_out[0]["infra_retry_count"] == 0

    # asset.emit(): five batches, emitted as they were committed (three by try 1, which then failed),
    # each starting one run of the partitioned consumer.
    ingest = dep.tries("asset_emit_ingestion", runs["asset_emit_ingestion"], "ingest")
    assert [(t["try_number"], t["state"]) for t in ingest] == [(1, "failed"), (2, "success")]
    events = [
        e
        for e in dep.rest("/assets/events?limit=100")["asset_events"]
        if e["name"] == "demo_batch_ready" and e["source_run_id"] == runs["asset_emit_ingestion"]
        # (not the outlet event of the task's success, which has no partition key)
        and e["partition_key"] is not None
    ]
    assert sorted(e["partition_key"] for e in events) == BATCHES
    assert {e["partition_key"]: e["extra"]["rows"] for e in events} == {b: 1000 * n for n, b in enumerate(BATCHES, 1)}

    def consumer_runs() -> dict[str, str]:
        found = dep.rest("/dags/asset_emit_batch_consumer/dagRuns?limit=100")["dag_runs"]
        return {r["partition_key"]: r["state"] for r in found}

    try:
        wait_for(
            lambda: set(BATCHES) <= {k for k, state in consumer_runs().items() if state in TERMINAL},
            timeout=240,
            interval=2,
            what="a consumer run per batch",
        )
    except TimeoutError:
        print(f"consumer runs: {consumer_runs()}")
        dep.dump_logs("scheduler", "worker-1", "dag-processor")
        raise
    assert consumer_runs() == dict.fromkeys(BATCHES, "success")


@pytest.mark.timeout(600)
def test_a_worker_container_killed_and_restarted_fails_its_try_as_infra_and_it_succeeds_on_try_2(deployment, redis_db):
    dep = deployment
    run_id = dep.trigger(W1_DAG)
    wait_running(dep, run_id)
    time.sleep(1)

    def announcement() -> dict | None:
        raw = redis_db.get("airflow-celery-worker-incarnation-celery@worker-1")
        return json.loads(raw) if raw else None

    old = announcement()
    assert old is not None, "no announcement under the node name celery@worker-1 (the container's host name)"

    kill_sent = time.time()
    killed_at = dep.kill("worker-1")  # returns once the engine reports the container stopped
    try1_writes = [r["t"] for r in dep.records(run_id) if r["try"] == 1]
    assert max(try1_writes) > kill_sent - 1, "try 1 was not writing when its worker was killed"
    restarted_at = dep.restart("worker-1")

    try:
        wait_for(lambda: (a := announcement()) and a["started_at"] != old["started_at"], timeout=120, what="new incarnation")
        try1 = wait_for(
            lambda: (t := dep.tries(W1_DAG, run_id, "hold")) and t[0]["state"] not in ("running", "queued") and t[0],
            timeout=HEARTBEAT_TIMEOUT + 30,
            what="try 1 ended",
        )
        wait_runs(dep, {W1_DAG: run_id}, timeout=120)
    except TimeoutError:
        dep.dump_logs("scheduler", "worker-1")
        raise
    new = announcement()
    # The restart evidence, not the heartbeat timeout, ended try 1.
    assert try1["failure_cause"] == "infra", try1
    reason = try1["failure_reason"]
    assert "Celery worker celery@worker-1 restarted" in reason, reason
    assert f"pid {old['pid']}" in reason and f"pid {new['pid']}" in reason, reason

    tries = dep.tries(W1_DAG, run_id, "hold")
    assert summary(tries) == [(1, "failed", "infra"), (2, "success", None)]
    # The infra retry raised max_tries by one (AIP-122); the task's own retries (0) were not spent.
    assert (tries[-1]["infra_retry_count"], tries[-1]["max_tries"]) == (1, 1)
    records = dep.records(run_id)
    try2_start = [r["t"] for r in records if r["try"] == 2 and r.get("start")]
    assert len(try2_start) == 1
    # No write of the killed try follows the kill: its last record precedes the moment the engine
    # reported the container stopped, and none came later (try 2 has finished since).
    last_try1 = max(r["t"] for r in records if r["try"] == 1)
    assert last_try1 <= killed_at, last_try1 - killed_at
    assert last_try1 < try2_start[0]
    from datetime import datetime

    ended = datetime.fromisoformat(try1["end_date"]).timestamp()
    print(
        f"\nworker-1 container: killed {killed_at - kill_sent:.1f}s after the signal; try 1 failed as infra "
        f"{ended - restarted_at:.1f}s after `start`; try 2 running {try2_start[0] - restarted_at:.1f}s after "
        f"`start` (last try-1 write {killed_at - last_try1:.2f}s before the container was reported stopped)\n"
        f"reason: {reason}"
    )


@default_line_only
@pytest.mark.timeout(600)
def test_a_worker_container_killed_and_not_restarted_stays_on_the_heartbeat_timeout(deployment, worker_2_lost):
    dep, run_id = deployment, worker_2_lost["run_id"]
    try:
        wait_runs(dep, {W2_DAG: run_id}, timeout=max(60.0, worker_2_lost["killed_at"] + HEARTBEAT_TIMEOUT + 120 - time.time()))
    except TimeoutError:
        dep.dump_logs("scheduler")
        raise
    tries = dep.tries(W2_DAG, run_id, "hold")
    assert summary(tries) == [(1, "failed", "unknown")], tries
    assert "restarted" not in (tries[0]["failure_reason"] or "")
    from datetime import datetime

    ended = datetime.fromisoformat(tries[0]["end_date"]).timestamp()
    # Nothing reported the lost worker earlier: the try ended on the heartbeat timeout.
    assert ended - worker_2_lost["killed_at"] > HEARTBEAT_TIMEOUT - 10, ended - worker_2_lost["killed_at"]
    print(f"\nworker-2 container (not restarted): try 1 failed as unknown {ended - worker_2_lost['killed_at']:.0f}s after the kill")
