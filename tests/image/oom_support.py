"""What the OOM container tests share: the memory cgroup's counter, the reason they expect, a run's end.

Used by test_oom_celery_e2e.py (a Celery worker container per queue) and test_oom_local_e2e.py (a
LocalExecutor deployment in one container).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from deployment import Deployment  # noqa: E402
from harness import wait_for  # noqa: E402

TERMINAL = {"success", "failed"}

#: The OOM-kill counter of the container's memory cgroup: cgroup v1 (these machines) or v2.
READ_COUNTER = "cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events"


def oom_reason(limit: str) -> re.Pattern[str]:
    """The reason of a try the supervisor saw OOM-killed under a memory limit shown as ``limit``: ``1 GiB``."""
    return re.compile(
        rf"^OOM-killed: memory cgroup limit {re.escape(limit)} \(oom_kill \d+ -> \d+\)\. "
        r"Task process was killed by SIGKILL \(9\) before it reported a state\."
    )


def oom_kills(dep: Deployment, component: str) -> int:
    """The ``oom_kill`` counter of ``component``'s container memory cgroup, read inside the container."""
    text = dep.exec(component, "sh", "-c", READ_COUNTER)
    (value,) = [int(line.split()[1]) for line in text.splitlines() if line.startswith("oom_kill ")]
    return value


def wait_run(
    dep: Deployment, dag_id: str, run_id: str, *, timeout: float = 300, dump: tuple[str, ...] = ()
) -> None:
    """Wait for a Dag run to end; print the containers' logs (``dump``, default all) if it does not."""
    try:
        wait_for(
            lambda: dep.run_state(dag_id, run_id) in TERMINAL,
            timeout=timeout,
            interval=2,
            what=f"the run of {dag_id} to finish",
        )
    except TimeoutError:
        dep.dump_logs(*dump)
        raise
