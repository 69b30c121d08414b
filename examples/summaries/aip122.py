"""Demo summary for AIP-122: the tries, infra_retry_count and recovery time of aip122_infra_retry."""

from __future__ import annotations

from _common import latest_run, run_finished, short, tries

TITLE = "AIP-122 infrastructure retries (aip122_infra_retry)"
FEATURES = ("aip-97", "aip-122")  # the demo shows this module on a line that carries these whole
DAG_IDS = ["aip122_infra_retry"]
TRIGGER = ["aip122_infra_retry"]
TIMEOUT = 180


def finished() -> bool:
    return run_finished("aip122_infra_retry")


def summarize() -> list[str]:
    run = latest_run("aip122_infra_retry")
    rows = tries("aip122_infra_retry", run.run_id)
    lines = []
    by_task: dict[str, list[dict]] = {}
    for row in rows:
        by_task.setdefault(row["task_id"], []).append(row)
        lines.append(
            f"{row['task_id']} try {row['try_number']}: {row['state']:<12} "
            f"cause={row['failure_cause'] or '-':<8} infra_retry_count={row['infra_retry_count']} "
            f"{short(row['failure_reason'], 70)}"
        )
    for task_id, task_rows in by_task.items():
        live = task_rows[-1]
        lines.append(
            f"{task_id}: {live['state']} after {live['try_number']} tr{'y' if live['try_number'] == 1 else 'ies'}, "
            f"infra_retry_count={live['infra_retry_count']}"
        )
        if len(task_rows) > 1 and task_rows[0]["end_date"] and live["start_date"]:
            recovery = (live["start_date"] - task_rows[0]["end_date"]).total_seconds()
            lines.append(f"{task_id}: next try running {recovery:.1f}s after the worker was lost")
    return lines
