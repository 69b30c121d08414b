"""Helpers the demo's summary modules share: read runs and task tries from the metadata DB."""

from __future__ import annotations

from typing import Any

TERMINAL_RUN_STATES = {"success", "failed"}


def latest_run(dag_id: str) -> Any | None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        run = (
            session.query(DagRun).filter(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).first()
        )
        if run is not None:
            session.expunge(run)
        return run


def run_finished(dag_id: str) -> bool:
    run = latest_run(dag_id)
    return run is not None and str(run.state) in TERMINAL_RUN_STATES


def tries(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Every try of every task of one run: archived tries from the history, then the live rows."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.utils.session import create_session

    rows: list[dict[str, Any]] = []
    with create_session() as session:
        for model in (TaskInstanceHistory, TaskInstance):
            for ti in session.query(model).filter(model.dag_id == dag_id, model.run_id == run_id):
                rows.append(
                    {
                        "task_id": ti.task_id,
                        "map_index": ti.map_index,
                        "try_number": ti.try_number,
                        "state": str(ti.state),
                        "failure_cause": getattr(ti, "failure_cause", None),
                        "failure_reason": getattr(ti, "failure_reason", None),
                        "infra_retry_count": getattr(ti, "infra_retry_count", None),
                        "start_date": ti.start_date,
                        "end_date": ti.end_date,
                        "live": model is TaskInstance,
                    }
                )
    rows.sort(key=lambda r: (r["task_id"], r["map_index"], r["try_number"], r["live"]))
    return rows


def short(text: str | None, width: int = 90) -> str:
    if not text:
        return "-"
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
