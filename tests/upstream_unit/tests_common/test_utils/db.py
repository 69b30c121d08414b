"""
Database helpers with the names and semantics of upstream's ``tests_common.test_utils.db``.

``initial_db_init`` builds the schema from the ORM (what ``airflow db reset`` does on a fresh
database); the ``clear_db_*`` helpers delete the rows of their tables.
"""

from __future__ import annotations


def initial_db_init() -> None:
    """Drop and re-create the test database from the ORM models, then stamp it at the head revision."""
    from airflow.utils import db

    db.resetdb()


def _delete(*models) -> None:
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    with create_session() as session:
        for model in models:
            # Airflow 3.4 keeps past tries as task_instance rows that an ORM hook hides unless asked.
            session.execute(delete(model).execution_options(include_all_attempts=True))


def _models_if_present(*names: str) -> list[type]:
    """The ``module:Class`` models this Airflow has; a release line may have dropped some."""
    import importlib

    found = []
    for name in names:
        module, attr = name.split(":")
        try:
            found.append(getattr(importlib.import_module(module), attr))
        except (ImportError, AttributeError):
            continue
    return found


def history_models() -> list[type]:
    """``[TaskInstanceHistory]`` where the line has that table (3.3); 3.4 keeps tries as TI rows."""
    return _models_if_present("airflow.models.taskinstancehistory:TaskInstanceHistory")


def clear_db_runs() -> None:
    """Delete Dag runs, task instances (and their history), XComs and task reschedules."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskreschedule import TaskReschedule

    # 3.4 stores XComs in two tables behind a read-only XComModel view, and has no task_map table.
    xcoms = _models_if_present("airflow.models.xcom:XComModelV2", "airflow.models.xcom:XComModelV1")
    xcoms = xcoms or _models_if_present("airflow.models.xcom:XComModel")
    task_map = _models_if_present("airflow.models.taskmap:TaskMap")
    _delete(*xcoms, *task_map, TaskReschedule, *history_models(), TaskInstance, DagRun)


def clear_db_dags() -> None:
    """Delete Dags, their versions, serialized forms and code."""
    from airflow.models.dag import DagModel, DagTag
    from airflow.models.dag_version import DagVersion
    from airflow.models.dagcode import DagCode
    from airflow.models.serialized_dag import SerializedDagModel

    _delete(DagTag, SerializedDagModel, DagCode, DagVersion, DagModel)


def clear_db_serialized_dags() -> None:
    from airflow.models.serialized_dag import SerializedDagModel

    _delete(SerializedDagModel)


def clear_db_dag_bundles() -> None:
    from airflow.models.dagbundle import DagBundleModel

    _delete(DagBundleModel)


def clear_db_jobs() -> None:
    """Delete job rows (scheduler, triggerer, Dag processor jobs)."""
    from airflow.jobs.job import Job

    _delete(Job)


def clear_db_assets() -> None:
    """Delete asset events, assets and their references (and, when present, emission idempotency keys)."""
    from airflow import models
    from airflow.models.asset import (
        AssetActive,
        AssetAliasModel,
        AssetDagRunQueue,
        AssetEvent,
        AssetModel,
        DagScheduleAssetReference,
        TaskOutletAssetReference,
    )

    extra = [m for m in (getattr(models, "AssetEventIdempotencyKey", None),) if m is not None]
    _delete(
        *extra,
        AssetDagRunQueue,
        AssetEvent,
        DagScheduleAssetReference,
        TaskOutletAssetReference,
        AssetActive,
        AssetAliasModel,
        AssetModel,
    )


def clear_all() -> None:
    """Clear the tables the shim's fixtures write to (upstream clears every table)."""
    clear_db_runs()
    clear_db_assets()
    clear_db_dags()
    clear_db_dag_bundles()
