"""Demo summary for out of memory as a failure cause (feature oom): the tries of oom_detection and the counter."""

from __future__ import annotations

import json
from typing import Any

from _common import latest_run, run_finished, short, tries

TITLE = "Out of memory, first class (oom_detection)"
FEATURES = ("aip-97", "retry-rules", "oom")  # the demo shows this module on a line that carries these whole
DAG_IDS = ["oom_detection"]
TRIGGER = ["oom_detection"]
TIMEOUT = 240


def finished() -> bool:
    return run_finished("oom_detection")


def _seen(run_id: str) -> dict[str, Any] | None:
    """What ``memory_cgroup`` returned: the counter the supervisor reads, and whether an OOM can be shown."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel.value)
            .filter(
                XComModel.dag_id == "oom_detection",
                XComModel.run_id == run_id,
                XComModel.task_id == "memory_cgroup",
                XComModel.key == "return_value",
            )
            .first()
        )
    if row is None:
        return None
    value = XComModel.deserialize_value(row)
    return json.loads(value) if isinstance(value, str) else value


def summarize() -> list[str]:
    run = latest_run("oom_detection")
    lines = []
    seen = _seen(run.run_id)
    if seen is None:
        lines.append("memory cgroup: memory_cgroup returned nothing")
    elif seen.get("counter"):
        lines.append(
            f"memory cgroup the supervisor reads: {seen['counter']} oom_kill={seen['oom_kill']} "
            f"limit={seen['limit'] or 'none'}"
        )
    if seen is not None and not seen.get("can_oom"):
        lines.append(f"no OOM kill shown on this machine: {seen['why']}")
    for row in tries("oom_detection", run.run_id):
        if row["task_id"] == "memory_cgroup":
            continue
        lines.append(
            f"{row['task_id']:<23} try {row['try_number']}: {row['state']:<8} "
            f"cause={row['failure_cause'] or '-':<11} reason={short(row['failure_reason'], 180)}"
        )
    lines.append(
        'allocate_past_the_limit has retries=2 and RetryRule(cause="oom", action=FAIL): an oom try fails at once'
    )
    return lines
