"""
AIP-97 failure causes reported by the KubernetesExecutor.

Each row is a pod status fixture (``fixtures/k8s/<row>.json``) shaped like ``kubectl get pod -o
json`` for that failure. The fixtures are served as a watch stream by a local HTTP endpoint and
read by the real ``kubernetes`` client inside the executor's real ``KubernetesJobWatcher``; the
resulting watch events go through the real ``AirflowKubernetesScheduler.process_watcher_task`` and
``KubernetesExecutor._change_state``, and the test reads the event the scheduler would consume.
"""

from __future__ import annotations

import queue
from uuid import UUID

import pytest
from _helpers import core_supports_failure_cause, event_failure
from k8s_support import TI_ID, UUID_KEYS, FakeKubeAPI, load_pod

from airflow.models.taskinstancekey import TaskInstanceKey
from airflow.providers.cncf.kubernetes.executors.failure_classification import classify_pod_failure
from airflow.providers.cncf.kubernetes.executors.kubernetes_executor import KubernetesExecutor
from airflow.providers.cncf.kubernetes.executors.kubernetes_executor_utils import (
    AirflowKubernetesScheduler,
    KubernetesJobWatcher,
)
from airflow.providers.cncf.kubernetes.kube_config import KubeConfig
from airflow.utils.state import TaskInstanceState

pytestmark = pytest.mark.requires_feature("aip-97-cncf-kubernetes")

#: Runs on the unpatched 3.3.2 core too (test_providers_on_unpatched_core.py), asserting the old
#: event shapes there; tests that need the AIP-97 core skip with "needs the AIP-97 core".
COVERS_UNPATCHED_CORE = True

INFRA, UNKNOWN = "infra", "unknown"


def _core_knows_oom() -> bool:
    try:
        from airflow._shared.state.failure import TaskFailureCause
    except ImportError:
        return False
    return "oom" in {c.value for c in TaskFailureCause}


#: The oom feature's cause for an OOMKilled container; ``unknown`` (same reason) on a core before it.
OOM = "oom" if _core_knows_oom() else UNKNOWN

# fixture, watch event type, expected cause, expected reason
ROWS = [
    (
        "preempted_by_scheduler",
        "MODIFIED",
        INFRA,
        "PreemptionByScheduler: default-scheduler: preempting to accommodate a higher priority pod",
    ),
    (
        "deleted_by_taint_manager",
        "DELETED",
        INFRA,
        "DeletionByTaintManager: Taint manager: deleting due to NoExecute taint",
    ),
    ("evicted_by_eviction_api", "MODIFIED", INFRA, "EvictionByEvictionAPI: Eviction API: evicting"),
    ("deleted_by_pod_gc", "MODIFIED", INFRA, "DeletionByPodGC: PodGC: node no longer exists"),
    (
        "terminated_by_kubelet_node_pressure",
        "MODIFIED",
        INFRA,
        "TerminationByKubelet: The node was low on resource: memory. Threshold quantity: 100Mi, "
        "available: 87692Ki. Container base was using 3145728Ki, request is 512Mi, has larger "
        "consumption of memory.",
    ),
    (
        "evicted_ephemeral_storage_limit",
        "MODIFIED",
        UNKNOWN,
        "Pod evicted without a DisruptionTarget condition: Pod ephemeral local storage usage exceeds "
        "the total limit of containers 2Gi.",
    ),
    (
        "oom_killed",
        "MODIFIED",
        OOM,
        "OOM-killed: container memory limit 1Gi; Container 'base' was OOMKilled (exit code 137)",
    ),
    # Only the task's own container (base) OOMKilled is the task's oom: a git-sync init container
    # killed at its own limit means the task's code never ran, and it never escalates base.
    (
        "init_container_oom_killed",
        "MODIFIED",
        UNKNOWN,
        "Init container 'git-sync' was OOMKilled (exit code 137), container memory limit 64Mi: not the "
        "task's container 'base', so not the task's oom",
    ),
    # A native sidecar the kubelet stops after base died (exit 143), listed first: base's OOM decides.
    (
        "native_sidecar_base_oom_killed",
        "MODIFIED",
        OOM,
        "OOM-killed: container memory limit 1Gi; Container 'base' was OOMKilled (exit code 137)",
    ),
    (
        "deleted_while_running",
        "DELETED",
        UNKNOWN,
        "Pod deleted while Running, without a DisruptionTarget condition",
    ),
    (
        "err_image_pull",
        "MODIFIED",
        UNKNOWN,
        "Container 'base' did not start: ErrImagePull: rpc error: code = NotFound desc = failed to pull "
        'and unpack image "docker.io/apache/airflw:3.3.2": failed to resolve reference '
        '"docker.io/apache/airflw:3.3.2": docker.io/apache/airflw:3.3.2: not found',
    ),
    (
        "create_container_config_error",
        "MODIFIED",
        UNKNOWN,
        "Container 'base' did not start: CreateContainerConfigError: "
        'secret "airflow-connections" not found',
    ),
    ("container_error_exit_1", "MODIFIED", UNKNOWN, "Container 'base' terminated with exit code 1 (Error)"),
    # The kubelet rejected the pod because the node was full when it got there: lack of capacity,
    # which retrying cures (unlike the configuration errors above, which stay unknown).
    (
        "out_of_cpu",
        "MODIFIED",
        INFRA,
        "Pod rejected by its node for lack of capacity: OutOfcpu: Pod was rejected: Node didn't have "
        "enough resource: cpu, requested: 250, used: 3900, capacity: 4000",
    ),
]
ROW_IDS = [row[0] for row in ROWS]

TI_KEY = TaskInstanceKey(
    dag_id="aip97_providers",
    task_id="crunch",
    run_id="manual__2026-11-30T03:12:00+00:00",
    try_number=1,
    map_index=-1,
)


def executor_key(ti_id: str = TI_ID):
    """The key the line's KubernetesExecutor uses for the fixtures' try (k8s_support.UUID_KEYS)."""
    if UUID_KEYS:  # 3.4: the attempt's UUID, from the pod's task_instance_id annotation
        from airflow.executors.workloads.types import TaskInstanceUuid

        return TaskInstanceUuid(UUID(ti_id))
    return TI_KEY


KEY = executor_key()


def watch(events: list[tuple[str, dict]]) -> list:
    """Run the real watcher over ``events`` served by a local API endpoint; return its queue."""
    watcher_queue: queue.Queue = queue.Queue()
    kube_config = KubeConfig()
    watcher = KubernetesJobWatcher(
        namespace="airflow",
        watcher_queue=watcher_queue,
        resource_version="0",
        scheduler_job_id="1",
        kube_config=kube_config,
        supports_task_instance_uuid=KubernetesExecutor.supports_task_instance_uuid,
    )
    with FakeKubeAPI() as api:
        api.events = events
        watcher._run(api.client(), "0", "1", kube_config)
        assert api.requests and "watch=True" in api.requests[0]
    return [watcher_queue.get_nowait() for _ in range(watcher_queue.qsize())]


def to_result(watch_event):
    """Turn a watcher event into the executor's result, as AirflowKubernetesScheduler does."""
    scheduler = object.__new__(AirflowKubernetesScheduler)  # only the queue hand-off is exercised
    scheduler.supports_task_instance_uuid = KubernetesExecutor.supports_task_instance_uuid
    scheduler.result_queue = queue.Queue()
    scheduler.process_watcher_task(watch_event)
    return scheduler.result_queue.get_nowait()


def test_the_fixtures_key_their_pods_as_the_executor_does():
    """3.4's provider keys by attempt UUID (the pods carry it); 3.3's by TaskInstanceKey."""
    assert KubernetesExecutor.supports_task_instance_uuid is UUID_KEYS
    assert ("task_instance_id" in load_pod("oom_killed")["metadata"]["annotations"]) is UUID_KEYS


@pytest.fixture(scope="module")
def watched() -> dict:
    events = [(etype, load_pod(name)) for name, etype, _, _ in ROWS]
    out = watch(events)
    assert len(out) == len(ROWS)
    return dict(zip(ROW_IDS, out, strict=True))


@pytest.mark.parametrize(("name", "etype", "cause", "reason"), ROWS, ids=ROW_IDS)
def test_watcher_collects_evidence(watched, name, etype, cause, reason):
    event = watched[name]
    assert event.state == TaskInstanceState.FAILED
    assert event.failure_details, "the watcher must collect details for every failure"
    assert classify_pod_failure(event.failure_details) == (cause, reason)


@pytest.mark.parametrize(("name", "etype", "cause", "reason"), ROWS, ids=ROW_IDS)
def test_executor_reports_cause(watched, name, etype, cause, reason):
    executor = KubernetesExecutor()
    executor.running.add(KEY)
    result = to_result(watched[name])
    assert result.key == KEY

    executor._change_state(result, session=None)

    assert KEY not in executor.running
    state, info = executor.event_buffer[KEY]
    assert state == TaskInstanceState.FAILED
    assert "because of None" not in str(info)
    got_cause, got_reason = event_failure(state, info)
    assert got_reason == reason
    if core_supports_failure_cause():
        assert got_cause == cause
    else:
        assert got_cause is None
        assert info == reason  # old core: the plain (state, info) tuple, info is the reason text


def test_running_pod_is_not_a_failure():
    pod = load_pod("deleted_while_running")
    # The same running pod, without a deletion: the watcher reports nothing.
    del pod["metadata"]["deletionTimestamp"]
    assert watch([("MODIFIED", pod)]) == []


def test_disruption_condition_must_be_true():
    """A DisruptionTarget condition whose status is not True is not evidence of a disruption."""
    pod = load_pod("preempted_by_scheduler")
    for condition in pod["status"]["conditions"]:
        if condition["type"] == "DisruptionTarget":
            condition["status"] = "False"
    (event,) = watch([("MODIFIED", pod)])
    cause, reason = classify_pod_failure(event.failure_details)
    assert cause == UNKNOWN
    assert reason == "Container 'base' terminated with exit code 143 (Error)"


# --- The scheduler records the cause (real metadata database) -----------------------------------

requires_patched_core = pytest.mark.skipif(
    not core_supports_failure_cause(), reason="needs the AIP-97 core to record causes"
)


@pytest.fixture(scope="module")
def dag_in_db(airflow_db):
    from scheduler_support import serialize_dag

    serialize_dag()


@pytest.fixture
def session(dag_in_db):
    from airflow.utils.session import create_session

    with create_session() as session:
        yield session


@requires_patched_core
@pytest.mark.db
@pytest.mark.parametrize(("name", "etype", "cause", "reason"), ROWS, ids=ROW_IDS)
def test_scheduler_records_cause(session, name, etype, cause, reason):
    from scheduler_support import process_events, running_ti, scheduler_job_id

    job_id = scheduler_job_id(session)
    ti = running_ti(TI_KEY.run_id, job_id=job_id, session=session)
    key = executor_key(str(ti.id))
    executor = KubernetesExecutor()
    executor.running.add(key)
    (event,) = watch([(etype, load_pod(name, ti_id=str(ti.id)))])  # the pod of this try
    executor._change_state(to_result(event), session=session)

    process_events(executor, job_id, session)

    session.refresh(ti)
    assert ti.state == TaskInstanceState.FAILED  # retries=0
    assert (ti.failure_cause, ti.failure_reason) == (cause, reason)


@pytest.mark.db
def test_pre_execution_requeue_still_works(session):
    """A pod that fails while its TI is still queued is requeued once without any event."""
    from airflow.providers.cncf.kubernetes.executors.kubernetes_executor import _PodLaunchAttempt
    from airflow.providers.cncf.kubernetes.executors.kubernetes_executor_types import KubernetesJob
    from scheduler_support import process_events, running_ti, scheduler_job_id

    job_id = scheduler_job_id(session)
    ti = running_ti(TI_KEY.run_id, job_id=job_id, session=session, state=TaskInstanceState.QUEUED)
    session.commit()
    key = executor_key(str(ti.id))
    executor = KubernetesExecutor()
    assert executor.pod_launch_failure_max_retries == 1  # the provider default
    executor.task_queue = queue.Queue()
    job = KubernetesJob(key, ["python"], None, None)
    executor.pod_launch_attempts[key] = _PodLaunchAttempt(job=job)
    executor.running.add(key)

    pod = load_pod("err_image_pull", ti_id=str(ti.id))
    (first,) = watch([("MODIFIED", pod)])
    executor._change_state(to_result(first), session=session)
    assert executor.task_queue.get_nowait() == job  # requeued, not reported
    assert key not in executor.event_buffer and key in executor.running

    pod["metadata"]["name"] = "aip97-k8s-crunch-i2"  # the requeued pod fails the same way
    (second,) = watch([("MODIFIED", pod)])
    executor._change_state(to_result(second), session=session)
    assert executor.task_queue.empty()
    state, info = executor.event_buffer[key]
    cause, reason = event_failure(state, info)
    assert reason.startswith("Container 'base' did not start: ErrImagePull: ")
    if core_supports_failure_cause():
        assert cause == UNKNOWN
        process_events(executor, job_id, session)
        session.refresh(ti)
        assert (ti.state, ti.failure_cause) == (TaskInstanceState.FAILED, UNKNOWN)
