"""An OOM kill in a LocalExecutor deployment in one container, and its negative controls (issue 37 §4).

One container from the patched image runs the api-server, the Dag processor and the scheduler
(LocalExecutor, whose worker processes supervise the tasks) under a memory limit of 1 GiB
(``--memory 1g``, no swap above it), on the PostgreSQL of .ci/services.sh; the Dags are
tests/image/dags/oom_container.py, mounted. Detection only: the LocalExecutor has no escalation.

* a task that allocates about 1 GiB is OOM-killed by the kernel inside the container: its try is
  ``oom`` with the container's limit in the reason (REST), and the container's memory cgroup counts
  the kill; the container, its scheduler and its api-server keep running;
* the example Dag of ``make demo`` (examples/dags/oom_detection.py), which shows an OOM kill where
  its worker has a memory limit of its own (here: 1 GiB): its task allocating past the limit is
  ``oom``, and its ``RetryRule(cause="oom", action=FAIL)`` fails it on try 1 although it has retries;
* negative controls, one after the other in the same container: a task killed by ``kill -9`` from
  outside (``podman exec``), with no OOM, is ``unknown``, its reason saying the counter did not rise;
  a task raising ``MemoryError`` is ``application``. The counter does not move.

The same with the host's processes and no container runs in tests/aip97_worker
(test_worker_failure_causes.py). Run time on the 2-core machine: 3 minutes for the module (the
container is up in 50 to 90 s), at a load average of 10.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests"))

import oom_support  # noqa: E402
from deployment import Deployment  # noqa: E402
from harness import pg_database, require_postgres, wait_for  # noqa: E402
from oom_support import oom_reason, wait_run  # noqa: E402

import lines  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.requires_feature("oom")]

DAGS = [HERE / "dags" / "oom_container.py", REPO / "examples" / "dags" / "oom_detection.py"]
LIMIT = "1g"
COMPONENT = "local"
#: Every component of the deployment in the one container; the scheduler is its main process.
ALL_IN_ONE = "airflow api-server & airflow dag-processor & exec airflow scheduler"
OOM_REASON = oom_reason("1 GiB")


@pytest.fixture(scope="module")
def deployment(engine, patched, tmp_path_factory):
    require_postgres()
    started = time.monotonic()
    with pg_database("t_image_oom_local") as db_url:
        env = {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "OOM_OUT": "/out",
        }
        name = f"aps-oomlocal-{lines.LINE.replace('.', '')}-{uuid.uuid4().hex[:6]}"
        with Deployment(
            engine, patched, env, home=tmp_path_factory.mktemp("deployment"), dags=DAGS, name=name
        ) as dep:
            try:
                dep.migrate()
                dep.start(COMPONENT, "bash", "-c", ALL_IN_ONE, memory=LIMIT)
                dep.wait_api()
                dep.wait_parsed(["oom_detect", "oom_controls", "oom_detection"])
            except Exception:
                dep.dump_logs()
                raise
            print(f"deployment up in {time.monotonic() - started:.0f}s")
            yield dep


def oom_kills(dep: Deployment) -> int:
    """The ``oom_kill`` counter of the one container's memory cgroup."""
    return oom_support.oom_kills(dep, COMPONENT)


@pytest.mark.timeout(900)
def test_oom_kill_is_oom_with_the_limit(deployment):
    dep = deployment
    assert oom_kills(dep) == 0
    run_id = dep.trigger("oom_detect")
    wait_run(dep, "oom_detect", run_id)

    (try1,) = dep.tries("oom_detect", run_id, "allocate_1gib")
    assert (try1["state"], try1["failure_cause"]) == ("failed", "oom"), try1
    assert OOM_REASON.match(try1["failure_reason"]), try1["failure_reason"]
    assert dep.records(run_id), "the task did not start"
    kills = oom_kills(dep)
    print(f"try 1 {try1['failure_cause']}: {try1['failure_reason']!r}; oom_kill {kills}")
    assert kills >= 1
    # The kernel killed the task process, not the deployment: the container and its components run.
    assert dep.running(COMPONENT)
    dep.rest("/monitor/health")


@pytest.mark.timeout(900)
def test_kill_9_from_outside_is_not_oom_and_memoryerror_is_application(deployment):
    dep = deployment
    kills_before = oom_kills(dep)
    run_id = dep.trigger("oom_controls")
    pid_file = dep.dir["out"] / f"{run_id.replace(':', '_')}.pid"
    wait_for(pid_file.exists, timeout=240, interval=1, what="killed_from_outside running")
    time.sleep(1)
    dep.exec(COMPONENT, "kill", "-9", pid_file.read_text().strip())
    wait_run(dep, "oom_controls", run_id)

    (killed,) = dep.tries("oom_controls", run_id, "killed_from_outside")
    assert (killed["state"], killed["failure_cause"]) == ("failed", "unknown"), killed
    assert killed["failure_reason"].startswith(
        "Task process was killed by SIGKILL (9) before it reported a state."
    )
    assert (
        "Not the kernel's OOM killer: the memory cgroup's oom_kill counter did not rise"
        in killed["failure_reason"]
    )

    (raised,) = dep.tries("oom_controls", run_id, "raises_memory_error")
    assert (raised["state"], raised["failure_cause"], raised["failure_reason"]) == (
        "failed",
        "application",
        "MemoryError: cannot allocate the lookup table",
    )
    assert oom_kills(dep) == kills_before


@pytest.mark.timeout(900)
def test_the_demo_dag_shows_an_oom_kill_and_its_rule(deployment):
    dep = deployment
    kills_before = oom_kills(dep)
    run_id = dep.trigger("oom_detection")
    wait_run(dep, "oom_detection", run_id)

    (oom,) = dep.tries("oom_detection", run_id, "allocate_past_the_limit")
    # Try 1 is the only one: the rule failed it, its two retries unspent.
    assert (oom["try_number"], oom["state"], oom["failure_cause"]) == (1, "failed", "oom"), oom
    assert oom["failure_reason"].startswith("OOM-killed: memory cgroup limit 1 GiB (oom_kill "), oom[
        "failure_reason"
    ]
    assert oom_kills(dep) == kills_before + 1
    (killed,) = dep.tries("oom_detection", run_id, "killed_by_sigkill")
    assert (killed["state"], killed["failure_cause"]) == ("failed", "unknown"), killed
    (raised,) = dep.tries("oom_detection", run_id, "raises_memory_error")
    assert (raised["state"], raised["failure_cause"]) == ("failed", "application"), raised
