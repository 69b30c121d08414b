"""
A user's subclass of a provider executor that overrides ``change_state()`` or ``fail()`` with the
3.3.2 signature (no ``failure_cause`` / ``failure_reason`` keywords) keeps working.

The providers report the cause inside the event's ``info`` (the core's ``with_failure_cause()``),
through the calls they made before AIP-97: ``fail(key, info)``, ``change_state(key, state, info)``
or a direct ``event_buffer`` write. So on a patched core the failure is recorded with its cause and
no ``TypeError`` is raised; on an unpatched core the calls are exactly the 3.3.2 ones.

Each executor runs on its real components: the Kubernetes watcher on a watch stream served from
the pod fixtures, the ECS executor on its botocore client with ``Stubber``, the Celery executor on
the real Redis result backend and a real (closed) broker port.
"""

from __future__ import annotations

import pytest

# The provider test modules set each executor's configuration (environment) when imported, and
# hold the fixtures' loaders: import them before any executor reads its configuration.
import test_celery_failure_cause as celery_tests
import test_ecs_failure_cause as ecs_tests
import test_k8s_failure_cause as k8s_tests
from _helpers import core_supports_failure_cause, event_failure
from k8s_support import load_pod

from airflow.utils.state import TaskInstanceState

pytestmark = pytest.mark.requires_feature("aip-97-cncf-kubernetes", "aip-97-amazon", "aip-97-celery")

#: Runs on the unpatched 3.3.2 core too (test_providers_on_unpatched_core.py), asserting the old
#: event shapes there; tests that need the AIP-97 core skip with "needs the AIP-97 core".
COVERS_UNPATCHED_CORE = True


def old_change_state(base: type) -> type:
    """A user's subclass of ``base`` that overrides change_state() with the 3.3.2 signature."""

    class UserExecutor(base):
        def change_state(self, key, state, info=None, remove_running=True):
            self.calls = [*getattr(self, "calls", []), ("change_state", key, state, info)]
            super().change_state(key, state, info, remove_running)

    UserExecutor.__name__ = f"OldChangeState{base.__name__}"
    return UserExecutor


def old_fail(base: type) -> type:
    """A user's subclass of ``base`` that overrides fail() with the 3.3.2 signature."""

    class UserExecutor(base):
        def fail(self, key, info=None):
            self.calls = [*getattr(self, "calls", []), ("fail", key, info)]
            super().fail(key, info)

    UserExecutor.__name__ = f"OldFail{base.__name__}"
    return UserExecutor


OVERRIDES = [old_change_state, old_fail]
OVERRIDE_IDS = ["overrides_change_state", "overrides_fail"]


def assert_reported(executor, key, cause: str, reason: str) -> None:
    state, info = executor.event_buffer[key]
    assert state == TaskInstanceState.FAILED
    got_cause, got_reason = event_failure(state, info)
    if core_supports_failure_cause():
        assert (got_cause, got_reason) == (cause, reason)
    else:
        assert got_cause is None


# --- Kubernetes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("override", OVERRIDES, ids=OVERRIDE_IDS)
def test_kubernetes_executor_subclass(override):
    KEY, to_result, watch = k8s_tests.KEY, k8s_tests.to_result, k8s_tests.watch
    from airflow.providers.cncf.kubernetes.executors.kubernetes_executor import KubernetesExecutor

    executor = override(KubernetesExecutor)()
    executor.running.add(KEY)
    (event,) = watch([("MODIFIED", load_pod("preempted_by_scheduler"))])

    executor._change_state(to_result(event), session=None)

    reason = "PreemptionByScheduler: default-scheduler: preempting to accommodate a higher priority pod"
    assert_reported(executor, KEY, "infra", reason)
    # As in 3.3.2, the executor writes a failed pod's event itself: the overrides are not called.
    assert getattr(executor, "calls", []) == []
    assert KEY not in executor.running


# --- ECS -------------------------------------------------------------------------------------------


@pytest.fixture
def ecs_executor(request):
    from botocore.stub import Stubber

    from airflow.providers.amazon.aws.executors.ecs.ecs_executor import AwsEcsExecutor

    executor = request.param(AwsEcsExecutor)()
    executor.max_run_task_attempts = "1"
    with Stubber(executor.ecs) as stubber:
        executor.stubber = stubber
        yield executor
        stubber.assert_no_pending_responses()


@pytest.mark.parametrize("ecs_executor", OVERRIDES, ids=OVERRIDE_IDS, indirect=True)
def test_ecs_executor_subclass_stopped_task(ecs_executor):
    KEY = ecs_tests.KEY
    ecs_tests.launch(ecs_executor)
    ecs_tests.stop(ecs_executor, "spot_interruption")

    assert_reported(ecs_executor, KEY, "infra", "SpotInterruption: Your Spot Task was interrupted.")
    # The failure went through the override, with the 3.3.2 call shape.
    (call,) = [c for c in ecs_executor.calls if c[0] == "fail" or c[2] == TaskInstanceState.FAILED]
    assert call[:2] in (("change_state", KEY), ("fail", KEY))
    assert KEY not in ecs_executor.running


@pytest.mark.parametrize("ecs_executor", OVERRIDES, ids=OVERRIDE_IDS, indirect=True)
def test_ecs_executor_subclass_run_task_failure(ecs_executor):
    KEY = ecs_tests.KEY
    ecs_executor.stubber.add_response("run_task", ecs_tests.response("run_task_capacity_unavailable"))
    ecs_executor.execute_async(KEY, ecs_tests.COMMAND)
    ecs_executor.running.add(KEY)
    ecs_executor.attempt_workload_runs()

    assert_reported(
        ecs_executor,
        KEY,
        "infra",
        "ECS RunTask failed 1 time(s): Capacity is unavailable at this time. Please try again later or "
        "in a different availability zone",
    )


# --- Celery ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("override", OVERRIDES, ids=OVERRIDE_IDS)
def test_celery_executor_subclass_failed_result(redis_db, override):
    from billiard.exceptions import WorkerLostError

    KEY, LOST = celery_tests.KEY, celery_tests.LOST
    from airflow.providers.celery.executors.celery_executor import CeleryExecutor

    executor = override(CeleryExecutor)()
    celery_tests.store_failure(executor, WorkerLostError(LOST))

    executor.sync()  # the result comes back from Redis and goes through fail(key, info)

    _, info = executor.event_buffer[KEY]
    raw = getattr(info, "info", info)
    assert type(raw).__name__ == "WorkerLostError"
    # A lost pool child on Linux, whose task process died with it (the Task SDK's guarantee): infra.
    assert_reported(executor, KEY, "infra", f"Celery worker child process lost: {LOST}")
    (call,) = [c for c in executor.calls if c[0] == "fail" or c[2] == TaskInstanceState.FAILED]
    assert call[:2] in (("change_state", KEY), ("fail", KEY))
    assert KEY not in executor.running and KEY not in executor.workloads


@pytest.mark.parametrize("override", OVERRIDES, ids=OVERRIDE_IDS)
def test_celery_executor_subclass_publish_failure(monkeypatch, override):
    KEY = celery_tests.KEY
    from airflow.providers.celery.executors import celery_executor_utils
    from airflow.providers.celery.executors.celery_executor import CeleryExecutor

    monkeypatch.setenv("AIRFLOW__CELERY__BROKER_URL", "redis://127.0.0.1:9/0")  # closed port
    celery_executor_utils._get_celery_app_for_workload.cache_clear()
    try:
        executor = override(CeleryExecutor)()
        executor._send_workloads([(KEY, celery_tests.execute_task_workload(), "default", None)])
    finally:
        celery_executor_utils._get_celery_app_for_workload.cache_clear()

    state, info = executor.event_buffer[KEY]
    cause, reason = event_failure(state, info)
    if core_supports_failure_cause():
        assert cause == "infra"
        assert reason.startswith("Failed to send the workload to the Celery broker: OperationalError: ")
    else:
        assert info is None


def no_override(base: type) -> type:
    return base


@pytest.mark.parametrize("override", [no_override, *OVERRIDES], ids=["celery_executor", *OVERRIDE_IDS])
def test_celery_executor_fails_the_try_of_a_restarted_worker(redis_db, override):
    """Issue 14: a STARTED workload stamped by an older incarnation of its node is failed as infra."""
    import json
    import uuid

    from celery.result import AsyncResult

    KEY = celery_tests.KEY
    from airflow.providers.celery.executors.celery_executor import CeleryExecutor
    from airflow.providers.celery.executors.worker_restart import (
        WorkerIncarnation,
        announcement_key,
        restart_reason,
    )

    executor = override(CeleryExecutor)()
    backend = executor.celery_app.backend
    old = WorkerIncarnation("celery@restart-0", 7, 1_700_000_000.0)
    new = old._replace(started_at=1_700_000_600.0)  # same pid again: a restarted container
    task_id = str(uuid.uuid4())
    stamp = {
        "pid": 11,
        "hostname": old.hostname,
        "worker_pid": old.pid,
        "worker_started_at": old.started_at,
        "dies_with_worker": True,
    }
    backend.store_result(task_id, stamp, "STARTED")
    backend.set(announcement_key(old.hostname), json.dumps(new._asdict()))
    executor.workloads[KEY] = AsyncResult(task_id, app=executor.celery_app)
    executor.running.add(KEY)

    executor.sync()

    if not core_supports_failure_cause():  # nothing could record the cause: 3.3's behaviour
        assert KEY not in executor.event_buffer
        assert KEY in executor.running and KEY in executor.workloads
        return
    assert_reported(executor, KEY, "infra", restart_reason(old, 11, new))
    assert KEY not in executor.running and KEY not in executor.workloads
    if override is not no_override:
        assert [c[:2] for c in executor.calls][-1] in (("change_state", KEY), ("fail", KEY))


def test_celery_executor_keeps_the_try_of_a_worker_with_the_same_incarnation(redis_db):
    import json
    import uuid

    from celery.result import AsyncResult

    KEY = celery_tests.KEY
    from airflow.providers.celery.executors.celery_executor import CeleryExecutor
    from airflow.providers.celery.executors.worker_restart import WorkerIncarnation, announcement_key

    executor = CeleryExecutor()
    backend = executor.celery_app.backend
    same = WorkerIncarnation("celery@restart-0", 7, 1_700_000_000.0)
    task_id = str(uuid.uuid4())
    backend.store_result(
        task_id,
        {
            "pid": 11,
            "hostname": same.hostname,
            "worker_pid": 7,
            "worker_started_at": same.started_at,
            "dies_with_worker": True,
        },
        "STARTED",
    )
    backend.set(announcement_key(same.hostname), json.dumps(same._asdict()))
    executor.workloads[KEY] = AsyncResult(task_id, app=executor.celery_app)
    executor.running.add(KEY)

    executor.sync()

    assert KEY not in executor.event_buffer
    assert KEY in executor.running and KEY in executor.workloads


redis_db = celery_tests.redis_db  # the Celery module's own Redis database, flushed around each test


# --- The core helper ---------------------------------------------------------------------------------


@pytest.mark.skipif(not core_supports_failure_cause(), reason="needs the AIP-97 core")
def test_with_failure_cause_builds_the_info_the_scheduler_reads():
    from airflow.executors.failure_info import (
        ExecutorFailureInfo,
        failure_details_from_event,
        unwrap_event_info,
        with_failure_cause,
    )

    key = k8s_tests.KEY
    failed = TaskInstanceState.FAILED
    info = with_failure_cause(key, failed, "raw", failure_cause="infra", failure_reason="x" * 2000)
    assert type(info) is ExecutorFailureInfo  # plain typed data, not a str subclass
    assert str(info) == "raw" and unwrap_event_info(info) == "raw"
    details = failure_details_from_event(failed, info)
    assert details.failure_cause == "infra" and len(details.failure_reason) == 1000
    # Nothing to attach: not a failed task-instance event, or no cause and no reason.
    assert with_failure_cause(key, TaskInstanceState.SUCCESS, "raw", failure_cause="infra") == "raw"
    assert with_failure_cause(key, failed, "raw", failure_cause=None) == "raw"
    # A reason without a cause is unknown; an invalid cause is refused.
    assert (
        failure_details_from_event(
            failed, with_failure_cause(key, failed, None, failure_cause=None, failure_reason="why")
        ).failure_cause
        == "unknown"
    )
    with pytest.raises(ValueError, match="infra"):
        with_failure_cause(key, failed, None, failure_cause="node-lost")
