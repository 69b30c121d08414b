"""Real Dag runs of ``dags/aip122_db_dag.py`` in the in-process database (conftest.py's ``db_env``)."""

from __future__ import annotations

import uuid

DAG_ID = "aip122_db"


def session():
    """A session of the in-process Airflow (``create_session``: committed on exit)."""
    from airflow.utils.session import create_session

    return create_session()


def dag(session, dag_id: str = DAG_ID):
    """The serialized ``aip122_db`` Dag (or ``dag_id``), as the scheduler reads it."""
    from airflow.models.dagbag import DBDagBag

    return DBDagBag(load_op_links=False).get_latest_version_of_dag(dag_id, session=session)


def new_run(session, prefix: str = "aip122", dag_id: str = DAG_ID) -> str:
    """Create a running manual Dag run (task instances included), commit it, and return its run_id."""
    from airflow._shared.timezones import timezone
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    run_id = f"{prefix}_{uuid.uuid4().hex[:10]}"
    dag(session, dag_id).create_dagrun(
        run_id=run_id,
        logical_date=None,
        data_interval=None,
        run_after=timezone.utcnow(),
        run_type=DagRunType.MANUAL,
        triggered_by=DagRunTriggeredByType.TEST,
        state=DagRunState.RUNNING,
        session=session,
    )
    session.commit()
    return run_id
