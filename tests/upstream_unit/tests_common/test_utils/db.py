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
            session.execute(delete(model))


def clear_db_runs() -> None:
    """Delete Dag runs, task instances (and their history), XComs and task reschedules."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.models.taskmap import TaskMap
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.models.xcom import XComModel

    _delete(XComModel, TaskMap, TaskReschedule, TaskInstanceHistory, TaskInstance, DagRun)


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
