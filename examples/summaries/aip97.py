"""Demo summary for AIP-97: the cause and reason of each try of aip97_failure_causes."""

from __future__ import annotations

from _common import latest_run, run_finished, short, tries

TITLE = "AIP-97 task failure classification (aip97_failure_causes)"
FEATURES = ("aip-97",)  # the demo shows this module on a line that carries these whole
DAG_IDS = ["aip97_failure_causes"]
TRIGGER = ["aip97_failure_causes"]
TIMEOUT = 240


def finished() -> bool:
    return run_finished("aip97_failure_causes")


def summarize() -> list[str]:
    run = latest_run("aip97_failure_causes")
    lines = []
    for row in tries("aip97_failure_causes", run.run_id):
        lines.append(
            f"{row['task_id']:<12} try {row['try_number']}: {row['state']:<14} "
            f"cause={row['failure_cause'] or '-':<11} reason={short(row['failure_reason'], 70)}"
        )
    return lines
