"""
Hand an executor's events to the real scheduler code on the real metadata database.

``SchedulerJobRunner.process_executor_events`` is the classmethod the scheduler loop calls for each
executor; calling it in process with a real ``DBDagBag`` and session is the scheduler's own handling
of the events, without the rest of the scheduling loop.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

DAG_ID = "aip97_providers"
TASK_ID = "crunch"

DAG_FILE = textwrap.dedent(
    f"""
    from __future__ import annotations

    import datetime

    from airflow.sdk import DAG, task

    with DAG("{DAG_ID}", schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False):

        @task(retries=0)
        def {TASK_ID}():
            return 1

        {TASK_ID}()
    """
)


def serialize_dag() -> None:
    """Write the test Dag into the dags folder and let Airflow parse and serialize it."""
    dags = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    (dags / f"{DAG_ID}.py").write_text(DAG_FILE)
    subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "reserialize"],
        check=True,
        capture_output=True,
        timeout=300,
    )


def scheduler_job_id(session) -> int:
    from airflow.jobs.job import Job

    job = Job()
    job.job_type = "SchedulerJob"
    session.add(job)
    session.flush()
    return job.id


def running_ti(run_id: str, *, job_id: int, session, state="running"):
    """Create (or reset) the run's task instance as the scheduler left it: queued by ``job_id``."""
    import pendulum

    from airflow.models.dagbag import DBDagBag
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    dag_run = session.query(DagRun).filter_by(dag_id=DAG_ID, run_id=run_id).one_or_none()
    if dag_run is None:
        dag = DBDagBag().get_latest_version_of_dag(DAG_ID, session=session)
        now = pendulum.now("UTC")
        dag_run = dag.create_dagrun(
            run_id=run_id,
            logical_date=None,
            run_after=now,
            run_type=DagRunType.MANUAL,
            triggered_by=DagRunTriggeredByType.TEST,
            state=DagRunState.RUNNING,
            session=session,
        )
    ti = session.query(TaskInstance).filter_by(dag_id=DAG_ID, run_id=run_id, task_id=TASK_ID).one()
    ti.state = state
    ti.try_number = 1
    ti.queued_by_job_id = job_id
    for column in ("failure_cause", "failure_reason"):
        if hasattr(ti, column):
            setattr(ti, column, None)
    session.flush()
    return ti


def process_events(executor, job_id: int, session) -> int:
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.dagbag import DBDagBag

    return SchedulerJobRunner.process_executor_events(
        executor=executor, job_id=job_id, scheduler_dag_bag=DBDagBag(), session=session
    )
