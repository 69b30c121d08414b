"""An OOM kill in a Celery worker container of a deployment from the patched image (issue 37 §4).

One deployment for the module (tests/image/deployment.py): ``airflow db migrate``, the api-server,
scheduler (CeleryExecutor) and Dag processor, each in its own container, on the PostgreSQL of
.ci/services.sh and a ``redis-server`` of its own on the host, and two Celery workers:

* ``worker-default``: queue ``default``, a container memory limit of 512 MiB (``--memory 512m``, no
  swap above it);
* ``worker-highmem``: queue ``highmem``, 2 GiB.

The Dags are tests/image/dags/oom_container.py and oom_escalation.py, mounted into every container.

``test_oom_kill_on_default_is_oom_and_the_worker_survives`` (detection): a task that allocates about
1 GiB on ``default`` is OOM-killed by the kernel inside the worker container; the try is recorded as
``oom`` with the container's limit in its reason (REST), the worker container is still running and
runs the next task, and the container's own memory cgroup shows ``oom_kill`` >= 1.

``test_oom_retry_escalates_to_highmem_and_succeeds`` (escalation, issue 37 §3): the same task with
``RetryRule(cause="oom", action=RETRY, escalate=MemoryEscalation(queue="highmem"))``: try 1 is
OOM-killed on ``default``, try 2 runs on ``highmem``, the escalation is recorded on the try, and the
task succeeds. It needs ``MemoryEscalation`` (the escalation patches).

Run time on the 2-core machine: the deployment is up in 50 s (load average 2) to 150 s (load
average 13); the detection test takes about 30 s more (74 s and 3 minutes in all, 3.3 and 3.4).
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
from harness import pg_database, private_redis, require_postgres  # noqa: E402
from oom_support import oom_kills, oom_reason, wait_run  # noqa: E402

import lines  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.requires_feature("oom", "aip-97-celery")]

DAGS = [HERE / "dags" / "oom_container.py", HERE / "dags" / "oom_escalation.py"]
DEFAULT_LIMIT, HIGHMEM_LIMIT = "512m", "2g"
#: The reason of a try the supervisor saw OOM-killed under the default worker's limit.
OOM_REASON = oom_reason("512 MiB")


@pytest.fixture(scope="module")
def deployment(engine, patched, tmp_path_factory):
    require_postgres()
    started = time.monotonic()
    with private_redis(tmp_path_factory.mktemp("redis")) as port, pg_database("t_image_oom") as db_url:
        broker = f"redis://127.0.0.1:{port}/0"
        env = {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": broker,
            "AIRFLOW__CELERY__RESULT_BACKEND": broker,
            "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "OOM_OUT": "/out",
        }
        name = f"aps-oom-{lines.LINE.replace('.', '')}-{uuid.uuid4().hex[:6]}"
        with Deployment(
            engine, patched, env, home=tmp_path_factory.mktemp("deployment"), dags=DAGS, name=name
        ) as dep:
            try:
                dep.migrate()
                for component in ("api-server", "scheduler", "dag-processor"):
                    dep.start(component)
                # One task at a time per worker: the counter is the container's, not the task's.
                dep.start_worker("worker-default", queues="default", concurrency=1, memory=DEFAULT_LIMIT)
                dep.start_worker("worker-highmem", queues="highmem", concurrency=1, memory=HIGHMEM_LIMIT)
                dep.wait_api()
                dep.wait_parsed(["oom_detect", "oom_after"])
            except Exception:
                dep.dump_logs()
                raise
            print(f"deployment up in {time.monotonic() - started:.0f}s")
            yield dep


def run_to_end(dep: Deployment, dag_id: str, timeout: float = 300) -> str:
    run_id = dep.trigger(dag_id)
    wait_run(dep, dag_id, run_id, timeout=timeout, dump=("scheduler", "worker-default", "worker-highmem"))
    return run_id


@pytest.mark.timeout(900)
def test_oom_kill_on_default_is_oom_and_the_worker_survives(deployment):
    dep = deployment
    assert oom_kills(dep, "worker-default") == 0
    run_id = run_to_end(dep, "oom_detect")

    (try1,) = dep.tries("oom_detect", run_id, "allocate_1gib")
    assert (try1["state"], try1["failure_cause"]) == ("failed", "oom"), try1
    assert OOM_REASON.match(try1["failure_reason"]), try1["failure_reason"]
    assert (try1["queue"], try1["hostname"]) == ("default", "worker-default")
    assert dep.records(run_id), "the task did not start"

    # The kernel killed the task process inside the worker container; its cgroup counted it.
    kills = oom_kills(dep, "worker-default")
    print(f"try 1 {try1['failure_cause']}: {try1['failure_reason']!r}; worker-default oom_kill {kills}")
    assert kills >= 1
    assert oom_kills(dep, "worker-highmem") == 0

    # The supervisor survived to report the try (the cause is its evidence); the worker survived too:
    # its container still runs, and it runs the next task.
    assert dep.running("worker-default")
    after = run_to_end(dep, "oom_after")
    (small,) = dep.tries("oom_after", after, "small")
    assert (small["state"], small["hostname"]) == ("success", "worker-default"), small
    assert dep.running("worker-default")


def escalation_fields(ti: dict) -> dict:
    """The try's escalation fields in the REST answer (the names are the escalation patches')."""
    return {key: value for key, value in ti.items() if "escalat" in key and value not in (None, "", [], {})}


@pytest.mark.timeout(900)
def test_oom_retry_escalates_to_highmem_and_succeeds(deployment):
    dep = deployment
    dep.wait_parsed(["oom_escalate"])
    kills_before = oom_kills(dep, "worker-default")
    run_id = run_to_end(dep, "oom_escalate", timeout=420)

    tries = dep.tries("oom_escalate", run_id, "allocate_1gib")
    assert [(t["try_number"], t["failure_cause"]) for t in tries] == [(1, "oom"), (2, None)], json.dumps(tries, default=str)
    try1, try2 = tries
    # The archived try reads failed (3.3's task_instance_history; up_for_retry where a line keeps the state it left with).
    assert try1["state"] in ("failed", "up_for_retry"), try1
    assert try2["state"] == "success", try2
    assert OOM_REASON.match(try1["failure_reason"]), try1["failure_reason"]
    assert (try1["queue"], try1["hostname"]) == ("default", "worker-default")
    # The rule sent the next try to the highmem queue, whose worker has the memory.
    assert (try2["queue"], try2["hostname"]) == ("highmem", "worker-highmem")
    assert oom_kills(dep, "worker-default") == kills_before + 1
    assert oom_kills(dep, "worker-highmem") == 0

    # What the retry got is recorded on the try and shown by the REST API: the queue highmem.
    recorded = {**escalation_fields(try1), **escalation_fields(try2)}
    assert recorded, f"no escalation field in the REST tries: {json.dumps(tries, default=str)}"
    assert "highmem" in json.dumps(recorded), recorded
    assert dep.run_state("oom_escalate", run_id) == "success"
