"""
The patched providers on an UNPATCHED Airflow core (the line's: 3.3.2, or 3.4.0b2): they import, run,
and report as before.

test_providers_on_unpatched_core.py runs it, with every provider test module that claims to cover the
unpatched core, in a venv holding the line's pinned core wheels and this checkout's provider wheels. Those
modules assert the old event shapes where the core lacks AIP-97; this module pins down the
compatibility contract itself. It is skipped on an AIP-97 core.
"""

from __future__ import annotations

import inspect

import pytest
from _helpers import core_supports_failure_cause

pytestmark = [
    pytest.mark.skipif(core_supports_failure_cause(), reason="the installed core has AIP-97"),
    pytest.mark.requires_feature("aip-97-cncf-kubernetes", "aip-97-amazon", "aip-97-celery"),
]

from airflow.executors.base_executor import BaseExecutor  # noqa: E402
from airflow.models.taskinstancekey import TaskInstanceKey  # noqa: E402
from airflow.utils.state import TaskInstanceState  # noqa: E402

#: Runs on the unpatched 3.3.2 core too (test_providers_on_unpatched_core.py), asserting the old
#: event shapes there; tests that need the AIP-97 core skip with "needs the AIP-97 core".
COVERS_UNPATCHED_CORE = True

KEY = TaskInstanceKey(dag_id="aip97_providers", task_id="crunch", run_id="r", try_number=1, map_index=-1)


def test_core_is_unpatched_and_providers_are_patched():
    from pstool.lock import load_lock

    import airflow

    assert airflow.__version__ == load_lock().release  # the line's pinned release, unpatched
    assert "failure_cause" not in inspect.signature(BaseExecutor.fail).parameters
    assert not hasattr(BaseExecutor, "supports_failure_cause")
    from airflow.providers.amazon.aws.executors.ecs import failure_classification as ecs
    from airflow.providers.celery.executors import failure_classification as celery
    from airflow.providers.cncf.kubernetes.executors import failure_classification as k8s

    for module in (ecs, celery, k8s):
        assert module.executor_supports_failure_cause() is False


class RecordingExecutor(BaseExecutor):
    """The 3.3.2 BaseExecutor, recording the calls the provider helpers make on it."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def change_state(self, key, state, info=None, remove_running=True):  # the 3.3.2 signature
        self.calls.append(("change_state", key, state, info))
        super().change_state(key, state, info, remove_running)


def test_helpers_make_the_old_calls():
    from airflow.providers.amazon.aws.executors.ecs.failure_classification import (
        EcsFailureClassification,
        fail_workload,
    )
    from airflow.providers.cncf.kubernetes.executors.failure_classification import (
        PodFailureClassification,
        report_pod_failure,
    )

    executor = RecordingExecutor()
    report_pod_failure(executor, KEY, TaskInstanceState.FAILED, PodFailureClassification("infra", "X: y"))
    assert executor.event_buffer[KEY] == (TaskInstanceState.FAILED, "X: y")
    assert executor.calls == []  # written directly, as _change_state always did

    fail_workload(executor, KEY, EcsFailureClassification("infra", "SpotInterruption: gone"))
    assert executor.calls == [("change_state", KEY, TaskInstanceState.FAILED, "SpotInterruption: gone")]


def test_celery_publish_failure_event_is_unchanged():
    from airflow.providers.celery.executors.failure_classification import fail_unpublished_workload

    executor = RecordingExecutor()
    fail_unpublished_workload(executor, KEY, ConnectionRefusedError(111, "refused"))
    assert executor.event_buffer[KEY] == (TaskInstanceState.FAILED, None)


def test_kubernetes_executor_runs(tmp_path):
    """The real executor handles a failed pod on the old core: a plain (state, reason) event."""
    from k8s_support import load_pod
    from test_k8s_failure_cause import executor_key, to_result, watch

    from airflow.providers.cncf.kubernetes.executors.kubernetes_executor import KubernetesExecutor

    key = executor_key()  # the fixtures' try, keyed as the line's executor keys it (3.4: by UUID)
    executor = KubernetesExecutor()
    executor.running.add(key)
    (event,) = watch([("MODIFIED", load_pod("oom_killed"))])
    executor._change_state(to_result(event), session=None)
    assert executor.event_buffer[key] == (
        TaskInstanceState.FAILED,
        "OOM-killed: container memory limit 1Gi; Container 'base' was OOMKilled (exit code 137)",
    )
