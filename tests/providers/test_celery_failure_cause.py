"""
AIP-97 failure causes reported by the CeleryExecutor, in process, against a real Redis.

The end-to-end path (a real worker whose pool child is SIGKILLed) is in test_celery_e2e.py.
"""

from __future__ import annotations

import os
import uuid

import pytest
from _helpers import REDIS_DB_IN_PROCESS, core_supports_failure_cause, event_failure

pytestmark = pytest.mark.requires_feature("aip-97-celery")

REDIS_DB = REDIS_DB_IN_PROCESS  # this module's own Redis database, one per line (_helpers.REDIS_DBS)
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
os.environ["AIRFLOW__CELERY__BROKER_URL"] = REDIS_URL
os.environ["AIRFLOW__CELERY__RESULT_BACKEND"] = REDIS_URL
os.environ["AIRFLOW__CELERY__TASK_PUBLISH_MAX_RETRIES"] = "0"
# The publish timeout (1 s by default) must not fire before the broker's own error on a busy machine:
# a timeout with nothing behind it is (rightly) infra, and would hide the error under test.
os.environ["AIRFLOW__CELERY__OPERATION_TIMEOUT"] = "10"

from billiard.exceptions import WorkerLostError  # noqa: E402
from celery.result import AsyncResult  # noqa: E402

from airflow.models.taskinstancekey import TaskInstanceKey  # noqa: E402
from airflow.providers.celery.executors import celery_executor_utils  # noqa: E402
from airflow.providers.celery.executors.celery_executor import CeleryExecutor  # noqa: E402
from airflow.utils.state import TaskInstanceState  # noqa: E402

#: Runs on the unpatched 3.3.2 core too (test_providers_on_unpatched_core.py), asserting the old
#: event shapes there; tests that need the AIP-97 core skip with "needs the AIP-97 core".
COVERS_UNPATCHED_CORE = True

KEY = TaskInstanceKey(dag_id="aip97_celery", task_id="crunch", run_id="manual__1", try_number=1, map_index=-1)
LOST = "Worker exited prematurely: signal 9 (SIGKILL) Job: 0."


@pytest.fixture
def redis_db():
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB)
    client.ping()
    client.flushdb()
    yield client
    client.flushdb()


def store_failure(executor: CeleryExecutor, exc: BaseException) -> str:
    """Store a FAILURE result the way a Celery worker does, and start tracking it."""
    task_id = str(uuid.uuid4())
    executor.celery_app.backend.mark_as_failure(task_id, exc)
    executor.workloads[KEY] = AsyncResult(task_id, app=executor.celery_app)
    executor.running.add(KEY)
    return task_id


def test_worker_lost_is_infra(redis_db):
    executor = CeleryExecutor()
    store_failure(executor, WorkerLostError(LOST))

    executor.sync()  # BulkStateFetcher reads the result from Redis (key-value backend path)

    state, info = executor.event_buffer[KEY]
    assert state == TaskInstanceState.FAILED
    assert str(info) == LOST  # the Celery result's exception, read back from Redis
    raw = getattr(info, "info", info)  # the patched core wraps it with the cause
    assert type(raw).__name__ == "WorkerLostError"
    cause, reason = event_failure(state, info)
    if core_supports_failure_cause():
        assert cause == "infra"
        assert reason == f"Celery worker child process lost: {LOST}"
        assert "SIGKILL" in reason
    else:
        assert cause is None
    assert KEY not in executor.running and KEY not in executor.workloads


def test_other_failure_has_no_cause(redis_db):
    """Task errors are reported by the task itself; the executor adds no cause to them."""
    executor = CeleryExecutor()
    store_failure(executor, RuntimeError("boom"))

    executor.sync()

    state, info = executor.event_buffer[KEY]
    assert state == TaskInstanceState.FAILED
    cause, reason = event_failure(state, info)
    assert reason == "boom"
    assert cause == ("unknown" if core_supports_failure_cause() else None)


def execute_task_workload(key: TaskInstanceKey = KEY):
    from airflow.executors.workloads import ExecuteTask

    return ExecuteTask.model_validate(
        {
            "token": "not-a-token",
            "dag_rel_path": "aip97.py",
            "bundle_info": {"name": "dags-folder", "version": None},
            "log_path": None,
            "ti": {
                "id": str(uuid.uuid4()),
                "dag_id": key.dag_id,
                "task_id": key.task_id,
                "run_id": key.run_id,
                "try_number": key.try_number,
                "map_index": key.map_index,
                "dag_version_id": str(uuid.uuid4()),
                "pool_slots": 1,
                "priority_weight": 1,
                "queue": "default",
            },
        }
    )


def publish_to(monkeypatch, broker_url: str):
    """Send one workload to ``broker_url`` through the real executor; return the event it wrote."""
    monkeypatch.setenv("AIRFLOW__CELERY__BROKER_URL", broker_url)
    celery_executor_utils._get_celery_app_for_workload.cache_clear()
    try:
        executor = CeleryExecutor()
        executor._send_workloads([(KEY, execute_task_workload(), "default", None)])
    finally:
        celery_executor_utils._get_celery_app_for_workload.cache_clear()
    return executor.event_buffer[KEY]


def test_publish_failure_is_infra(monkeypatch):
    # Port 9 (discard) is closed on loopback: publishing fails with a broker connection error.
    state, info = publish_to(monkeypatch, "redis://127.0.0.1:9/0")

    assert state == TaskInstanceState.FAILED
    cause, reason = event_failure(state, info)
    if core_supports_failure_cause():
        assert cause == "infra"
        assert reason.startswith("Failed to send the workload to the Celery broker: OperationalError: ")
        assert "127.0.0.1:9" in reason
    else:
        assert info is None  # exactly the event the unpatched provider wrote


def test_worker_lost_is_infra_only_if_the_task_process_died_with_it():
    """Issue 9, part 1: no infra for a lost pool child unless its task process provably died too."""
    import importlib.util

    from airflow.providers.celery.executors.failure_classification import (
        classify_celery_result,
        task_process_dies_with_pool_child,
    )

    guaranteed = classify_celery_result(WorkerLostError(LOST), task_process_dies_with_supervisor=True)
    assert guaranteed == ("infra", f"Celery worker child process lost: {LOST}")
    cause, reason = classify_celery_result(WorkerLostError(LOST), task_process_dies_with_supervisor=False)
    assert cause == "unknown"
    assert reason.startswith(f"Celery worker child process lost: {LOST} ")
    assert "cannot guarantee that the task process died" in reason
    # The pool child is the supervisor, so the Task SDK's guarantee covers it: on this Linux host
    # with a Task SDK that has it, it holds; an older Task SDK gives none.
    has_sdk_guarantee = importlib.util.find_spec("airflow.sdk.execution_time.parent_death") is not None
    assert task_process_dies_with_pool_child() is has_sdk_guarantee
    assert classify_celery_result(WorkerLostError(LOST)).cause == ("infra" if has_sdk_guarantee else "unknown")


@pytest.fixture
def password_redis(tmp_path):
    """A real Redis that requires a password, on a free loopback port."""
    import subprocess
    import time

    import redis
    from harness import free_port

    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--requirepass",
            "s3cret",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(host="127.0.0.1", port=port, password="s3cret")
        for _ in range(50):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _configuration_error_cases():
    # (id, broker URL or fixture marker, error type the reason must name)
    return [
        ("no_credentials", "redis://127.0.0.1:{port}/0", "AuthenticationError"),
        ("wrong_password", "redis://:wrong@127.0.0.1:{port}/0", "AuthenticationError"),
        (
            "missing_ca_file",
            "rediss://127.0.0.1:{port}/0?ssl_cert_reqs=required&ssl_ca_certs=/nonexistent/airflow-ca.pem",
            "FileNotFoundError",
        ),
        ("unresolvable_host", "redis://no-such-broker.invalid:6379/0", "gaierror"),
    ]


@pytest.mark.parametrize(
    ("url", "error"),
    [c[1:] for c in _configuration_error_cases()],
    ids=[c[0] for c in _configuration_error_cases()],
)
def test_publish_configuration_error_is_not_infra(monkeypatch, password_redis, url, error):
    """A broker that refuses the credentials, a missing certificate file or a broker host name that
    does not resolve: retrying cannot cure them, so they are never infra; the reason keeps the error."""
    state, info = publish_to(monkeypatch, url.format(port=password_redis))

    assert state == TaskInstanceState.FAILED
    cause, reason = event_failure(state, info)
    if core_supports_failure_cause():
        assert cause == "unknown", reason
        # Kombu's OperationalError, or the executor's publish timeout if kombu kept retrying.
        assert reason.startswith("Failed to send the workload to the Celery broker: ")
        assert f"(caused by {error}: " in reason
    else:
        assert info is None


def test_serialization_error_is_not_infra():
    """A workload the broker's serializer cannot encode (kombu's real EncodeError) is not infra."""
    from kombu.exceptions import EncodeError
    from kombu.serialization import dumps

    from airflow.providers.celery.executors.failure_classification import classify_publish_failure

    with pytest.raises(EncodeError) as excinfo:
        dumps(object(), serializer="json")
    cause, reason = classify_publish_failure(excinfo.value)
    assert cause == "unknown"
    assert reason.startswith("Failed to send the workload to the Celery broker: EncodeError: ")


def test_publish_configuration_error_from_the_publishing_subprocesses(monkeypatch, password_redis):
    """
    Several workloads with ``sync_parallelism > 1`` are published from a process pool: the error
    comes back pickled, without its chain (the redis AuthenticationError behind kombu's
    OperationalError). The configuration error found in the subprocess still decides.
    """
    monkeypatch.setenv("AIRFLOW__CELERY__BROKER_URL", f"redis://127.0.0.1:{password_redis}/0")
    celery_executor_utils._get_celery_app_for_workload.cache_clear()
    keys = [KEY, KEY._replace(task_id="crunch_too")]
    try:
        executor = CeleryExecutor()
        executor._sync_parallelism = 2
        executor._send_workloads([(k, execute_task_workload(k), "default", None) for k in keys])
    finally:
        celery_executor_utils._get_celery_app_for_workload.cache_clear()

    for key in keys:
        state, info = executor.event_buffer[key]
        assert state == TaskInstanceState.FAILED
        cause, reason = event_failure(state, info)
        if core_supports_failure_cause():
            assert cause == "unknown"
            assert "(caused by AuthenticationError: " in reason
        else:
            assert info is None
