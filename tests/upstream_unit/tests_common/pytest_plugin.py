"""
Fixtures and markers of upstream's ``tests_common.pytest_plugin``, the subset the series' tests use.

Semantics follow upstream's definitions (``devel-common/src/tests_common/pytest_plugin.py``):

* ``session``: a ``create_session()`` session, rolled back after the test;
* ``dag_maker``: ``with dag_maker("dag_id") as dag: ...`` writes the Dag (DagModel, DagVersion,
  SerializedDagModel) to the database in the ``dag_maker`` bundle on exit;
  ``dag_maker.create_dagrun(**kwargs)`` creates a run of the serialized Dag (manual, state running,
  run_id ``test`` by default) and ``dag_maker.serialized_dag`` is that Dag; ``serialized=True``
  makes the context manager return the serialized Dag;
* ``create_dummy_dag`` / ``create_task_instance``: a one-``EmptyOperator`` Dag (``dag`` / ``op1``)
  and its run, returning the DAG and task / the task instance;
* ``mock_supervisor_comms``: an autospec of the Task SDK's ``CommsDecoder`` set as
  ``task_runner.SUPERVISOR_COMMS``;
* ``test_client``: a FastAPI ``TestClient`` of the whole API server app with an admin
  SimpleAuthManager token, based at ``/api/v2`` for tests under ``.../public/``, ``/ui`` under
  ``.../ui/`` (upstream: ``airflow-core/tests/unit/api_fastapi/conftest.py``);
* ``client``: for tests under ``api_fastapi/execution_api/``, a ``TestClient`` of the Execution
  API with the JWT check replaced by a token for the task instance in the path (upstream:
  ``airflow-core/tests/unit/api_fastapi/execution_api/conftest.py``); elsewhere, upstream's
  ``client(apps=...)`` factory; ``exec_app`` is the Execution API sub-app of that client;
* markers ``db_test`` and ``need_serialized_dag``.

The database is built once per session from the ORM and the tables the fixtures write to are
cleared before each test module, as upstream's ``_clear_db`` does.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from fastapi import (
    Request,  # resolved by FastAPI from this module's globals; does not import airflow
)

# As upstream: do not import airflow at module level; the conftest configures it first.

DEFAULT_DATE = datetime(2016, 1, 1, tzinfo=UTC)
SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


# Upstream's markers (db_test, need_serialized_dag, want_activate_assets) are registered with the
# suite's own in tests/conftest.py.


@pytest.fixture(scope="session", autouse=True)
def _initialize_db() -> None:
    from tests_common.test_utils.db import initial_db_init

    initial_db_init()


@pytest.fixture(scope="module", autouse=True)
def _clear_db(_initialize_db) -> None:
    from tests_common.test_utils.db import clear_all

    clear_all()


@pytest.fixture(autouse=True)
def close_all_sqlalchemy_sessions() -> Generator[None, None, None]:
    from sqlalchemy.orm import close_all_sessions

    close_all_sessions()
    yield
    close_all_sessions()


@pytest.fixture
def session():
    from airflow.utils.session import create_session

    with create_session() as session:
        yield session
        session.rollback()


class _DagFactory:
    """What ``dag_maker`` yields; see the module docstring."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._dag_ids: set[str] = set()
        self._own_session = False
        self.session = None
        self.dag = None
        self.dag_model = None
        self.dag_run = None
        self.serialized_model = None

    def __call__(
        self,
        dag_id: str = "test_dag",
        schedule: Any = timedelta(days=1),
        serialized: bool | None = None,
        fileloc: str | None = None,
        bundle_name: str | None = None,
        bundle_version: str | None = None,
        session=None,
        **kwargs,
    ) -> _DagFactory:
        from airflow import settings
        from airflow.sdk import DAG

        if serialized is None:
            marker = self._request.node.get_closest_marker("need_serialized_dag")
            serialized = bool(marker and (marker.args or (True,))[0])
        if session is None:
            self._own_session = True
            session = settings.Session()
        self.session = session
        self.want_serialized = serialized
        self.bundle_name = bundle_name or "dag_maker"
        self.bundle_version = bundle_version
        start_date = kwargs.get("start_date") or (kwargs.get("default_args") or {}).get("start_date")
        self.start_date = start_date or getattr(self._request.module, "DEFAULT_DATE", DEFAULT_DATE)
        kwargs["start_date"] = self.start_date
        self.dag = DAG(dag_id, schedule=schedule, **kwargs)
        self.dag.fileloc = fileloc or self._request.module.__file__
        self._dag_ids.add(dag_id)
        return self

    def __enter__(self):
        self.dag.__enter__()
        if self.want_serialized:
            import lazy_object_proxy

            return lazy_object_proxy.Proxy(lambda: self.serialized_dag)
        return self.dag

    def __exit__(self, exc_type, exc, tb) -> None:
        self.dag.__exit__(exc_type, exc, tb)
        if exc_type is not None:
            return
        self.sync_dag_to_db()
        from airflow.models.dag import DagModel

        self.dag_model = self.session.get(DagModel, self.dag.dag_id)
        self.session.commit()

    def sync_dag_to_db(self) -> None:
        from airflow.models.dagbundle import DagBundleModel
        from airflow.models.serialized_dag import SerializedDagModel
        from airflow.serialization.definitions.dag import SerializedDAG
        from airflow.serialization.serialized_objects import LazyDeserializedDAG
        from sqlalchemy import select

        if self.session.scalar(select(DagBundleModel).where(DagBundleModel.name == self.bundle_name)) is None:
            self.session.add(DagBundleModel(name=self.bundle_name))
            self.session.flush()
        lazy = LazyDeserializedDAG.from_dag(self.dag)
        SerializedDAG.bulk_write_to_db(self.bundle_name, self.bundle_version, [lazy], session=self.session)
        SerializedDagModel.write_dag(
            lazy, bundle_name=self.bundle_name, bundle_version=self.bundle_version, session=self.session
        )
        self.session.flush()
        self.serialized_model = SerializedDagModel.get(self.dag.dag_id, session=self.session)

    @property
    def serialized_dag(self):
        return self.serialized_model.dag

    def create_dagrun(self, *, logical_date=None, **kwargs):
        from airflow._shared.timezones import timezone as tz
        from airflow.utils.state import DagRunState
        from airflow.utils.types import DagRunTriggeredByType, DagRunType

        dag = self.serialized_dag
        run_type = DagRunType(kwargs.pop("run_type", DagRunType.MANUAL))
        logical_date = tz.coerce_datetime(logical_date or self.start_date)
        data_interval = kwargs.pop("data_interval", None)
        if data_interval is None:
            data_interval = dag.timetable.infer_manual_data_interval(run_after=logical_date)
        kwargs.setdefault("run_id", "test")
        kwargs.setdefault("state", DagRunState.RUNNING)
        kwargs.setdefault("start_date", self.start_date)
        kwargs.setdefault("triggered_by", DagRunTriggeredByType.TEST)
        kwargs.setdefault("run_after", data_interval[-1] if data_interval else tz.utcnow())
        kwargs["session"] = kwargs.get("session") or self.session
        self.dag_run = dag.create_dagrun(
            logical_date=logical_date, data_interval=data_interval, run_type=run_type, **kwargs
        )
        for ti in self.dag_run.task_instances:
            ti.refresh_from_task(dag.get_task(ti.task_id))
        self.session.commit()
        return self.dag_run

    def create_ti(self, task_id: str, dag_run=None, dag_run_kwargs: dict | None = None, map_index: int = -1):
        if dag_run is None:
            dag_run = self.create_dagrun(**(dag_run_kwargs or {}))
        ti = dag_run.get_task_instance(task_id=task_id, map_index=map_index, session=self.session)
        if ti is None:
            raise ValueError(f"Task instance with task_id {task_id!r} not found in dag run")
        ti.refresh_from_task(self.serialized_dag.get_task(task_id))
        return ti

    def cleanup(self) -> None:
        from airflow.models.dag import DagModel
        from airflow.models.dag_version import DagVersion
        from airflow.models.dagrun import DagRun
        from airflow.models.taskinstance import TaskInstance
        from sqlalchemy import delete

        from tests_common.test_utils.db import history_models

        if not self._dag_ids or self.session is None:
            return
        ids = list(self._dag_ids)
        self.session.rollback()
        for model in (*history_models(), TaskInstance, DagRun, DagVersion, DagModel):
            stmt = delete(model).where(model.dag_id.in_(ids))
            self.session.execute(stmt.execution_options(include_all_attempts=True))
        self.session.commit()
        if self._own_session:
            self.session.close()


@pytest.fixture
def dag_maker(request: pytest.FixtureRequest):
    factory = _DagFactory(request)
    try:
        yield factory
    finally:
        factory.cleanup()


@pytest.fixture
def create_dummy_dag(dag_maker):
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.utils.types import DagRunType

    def create_dag(
        dag_id="dag",
        task_id="op1",
        pool="default_pool",
        trigger_rule="all_done",
        with_dagrun_type=DagRunType.SCHEDULED,
        **kwargs,
    ):
        with dag_maker(dag_id, **kwargs) as dag:
            op = EmptyOperator(task_id=task_id, pool=pool, trigger_rule=trigger_rule)
        if with_dagrun_type is not None:
            dag_maker.create_dagrun(run_type=with_dagrun_type)
        return dag, op

    return create_dag


@pytest.fixture
def create_task_instance(dag_maker):
    """A TaskInstance of a one-``EmptyOperator`` Dag and its run (upstream's operator keywords subset)."""
    from airflow.providers.standard.operators.empty import EmptyOperator

    def maker(
        logical_date=None,
        dagrun_state=None,
        state=None,
        run_id=None,
        run_type=None,
        dag_id="dag",
        task_id="op1",
        map_index=-1,
        hostname=None,
        pid=None,
        **kwargs,
    ):
        operator_keys = (
            "retries",
            "retry_delay",
            "max_infra_retries",
            "pool",
            "trigger_rule",
            "executor_config",
            "on_failure_callback",
            "on_retry_callback",
        )
        op_kwargs = {k: kwargs.pop(k) for k in operator_keys if k in kwargs}
        with dag_maker(dag_id, **kwargs):
            EmptyOperator(task_id=task_id, **op_kwargs)
        run_kwargs: dict[str, Any] = {"logical_date": logical_date}
        if dagrun_state is not None:
            run_kwargs["state"] = dagrun_state
        if run_id is not None:
            run_kwargs["run_id"] = run_id
        if run_type is not None:
            run_kwargs["run_type"] = run_type
        dagrun = dag_maker.create_dagrun(**run_kwargs)
        (ti,) = dagrun.task_instances
        ti.state = state
        ti.map_index = map_index
        ti.hostname = hostname or ""
        ti.pid = pid
        dag_maker.session.flush()
        ti.task = dag_maker.serialized_dag.get_task(task_id)
        return ti

    return maker


@pytest.fixture
def mock_supervisor_comms(monkeypatch):
    from airflow.sdk.execution_time import comms, task_runner

    decoder = mock.create_autospec(comms.CommsDecoder)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", decoder, raising=False)
    yield decoder


def _api_base_path(request: pytest.FixtureRequest) -> str:
    return {"public": "/api/v2", "ui": "/ui"}.get(os.path.basename(os.path.dirname(request.path)), "/")


_API_APP: dict[str, Any] = {}


def _api_app():
    """
    The API server app with the SimpleAuthManager, built once per session.

    Upstream builds it for each test; building takes seconds, and the series' tests do not change
    the app, so the shim reuses it.
    """
    if "app" not in _API_APP:
        from airflow.api_fastapi.app import create_app

        from tests_common.test_utils.config import conf_vars

        with conf_vars({("core", "auth_manager"): SIMPLE_AUTH_MANAGER}):
            _API_APP["app"] = create_app()
    return _API_APP["app"]


@pytest.fixture
def test_client(request: pytest.FixtureRequest):
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from tests_common.test_utils.config import conf_vars

    with conf_vars({("core", "auth_manager"): SIMPLE_AUTH_MANAGER}):
        app = _api_app()
        auth_manager = app.state.auth_manager
        token = auth_manager._get_token_signer().generate(
            auth_manager.serialize_user(SimpleAuthManagerUser(username="test", role="admin"))
        )
        yield TestClient(
            app,
            headers={"Authorization": f"Bearer {token}"},
            base_url=f"http://testserver{_api_base_path(request)}",
        )


def _execution_api_client(request: pytest.FixtureRequest):
    from uuid import UUID

    from airflow.api_fastapi.app import cached_app
    from airflow.api_fastapi.execution_api.datamodels.token import TIClaims, TIToken
    from airflow.api_fastapi.execution_api.security import _jwt_bearer
    from fastapi.testclient import TestClient

    app = cached_app(apps="execution")
    exec_app = next(r.app for r in app.routes if getattr(r, "path", None) == "/execution")

    async def jwt_for_path_ti(request: Request):
        ti_id = UUID(request.path_params.get("task_instance_id", "00000000-0000-0000-0000-000000000000"))
        claims = TIClaims(sub=ti_id, exp=0, iat=0, nbf=0, scope="execution")
        return TIToken(id=claims.sub, claims=claims)

    exec_app.dependency_overrides[_jwt_bearer] = jwt_for_path_ti
    try:
        with TestClient(app, headers={"Authorization": "Bearer fake"}) as client:
            yield client
    finally:
        exec_app.dependency_overrides.pop(_jwt_bearer, None)


@pytest.fixture
def exec_app(client):
    """The Execution API sub-app of ``client`` (upstream: execution_api conftest)."""
    return next(r.app for r in client.app.routes if getattr(r, "path", None) == "/execution")


@pytest.fixture
def client(request: pytest.FixtureRequest):
    if "/api_fastapi/execution_api/" in str(request.path):
        yield from _execution_api_client(request)
        return
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    def create_test_client(apps="all"):
        return TestClient(create_app(apps=apps), base_url=f"http://testserver{_api_base_path(request)}")

    yield create_test_client
