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


def _all_tries(session, dag_id: str, run_id: str) -> list[tuple[Any, bool]]:
    """``(row, live)`` for every try of the run's tasks, archived ones included."""
    from airflow.models.taskinstance import TaskInstance

    if hasattr(TaskInstance, "working_set"):
        # Airflow 3.4: every try is its own task_instance row (the archived ones have working_set
        # NULL) and there is no task_instance_history; the ORM shows only live rows unless asked.
        query = (
            session.query(TaskInstance)
            .filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
            .execution_options(include_all_attempts=True)
        )
        return [(ti, ti.working_set is True) for ti in query]
    from airflow.models.taskinstancehistory import TaskInstanceHistory

    return [
        (ti, model is TaskInstance)
        for model in (TaskInstanceHistory, TaskInstance)
        for ti in session.query(model).filter(model.dag_id == dag_id, model.run_id == run_id)
    ]


def tries(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Every try of every task of one run: archived tries first, then the live rows."""
    from airflow.utils.session import create_session

    rows: list[dict[str, Any]] = []
    with create_session() as session:
        for ti, live in _all_tries(session, dag_id, run_id):
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
                    "live": live,
                }
            )
    rows.sort(key=lambda r: (r["task_id"], r["map_index"], r["try_number"], r["live"]))
    return rows


def short(text: str | None, width: int = 90) -> str:
    if not text:
        return "-"
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
