"""
The executor side of AIP-97: reporting a cause, and executors written before it.

These run the real BaseExecutor and the real scheduler-side reader (no database needed): an
executor that writes ``event_buffer`` 2-tuples itself, one that calls ``fail(key, info)``, one that
overrides ``change_state`` with the pre-AIP-97 signature (as CeleryExecutor does), and one that
reports a cause.
"""

from __future__ import annotations

import gc

import pytest
from airflow._shared.state.failure import FAILURE_REASON_MAX_LENGTH, TaskFailureCause
from airflow.executors.base_executor import BaseExecutor
from airflow.executors.failure_info import (
    ExecutorFailureInfo,
    failure_details_from_event,
    unwrap_event_info,
)
from airflow.models.taskinstancekey import TaskInstanceKey
from airflow.utils.state import TaskInstanceState

KEY = TaskInstanceKey("dag", "task", "run", 1, -1)


class OldStyleOverride(BaseExecutor):
    """change_state overridden with the signature it had before AIP-97 (like CeleryExecutor)."""

    def change_state(self, key, state, info=None, remove_running=True) -> None:
        super().change_state(key, state, info, remove_running=remove_running)


def _details(executor: BaseExecutor, key=KEY):
    state, info = executor.get_event_buffer()[key]
    return state, info, failure_details_from_event(state, info)


@pytest.mark.parametrize("executor_class", [BaseExecutor, OldStyleOverride])
def test_an_executor_that_feature_detects_the_cause_gets_it_recorded(executor_class):
    """What a provider that also runs on older cores does: report the cause where the core says it can."""
    executor = executor_class()
    if getattr(executor, "supports_failure_cause", False):
        executor.fail(KEY, None, failure_cause="infra", failure_reason="node lost")
    else:  # an older core: the cause would be lost
        executor.fail(KEY, None)
    _, _, details = _details(executor)
    assert details.failure_cause is TaskFailureCause.INFRA
    assert details.failure_reason == "node lost"


def test_fail_with_cause_keeps_a_two_tuple_and_the_original_info():
    executor = BaseExecutor()
    executor.running.add(KEY)
    executor.fail(
        KEY,
        "pod-123",
        failure_cause="infra",
        failure_reason="Pod evicted: node drained",
    )
    assert KEY not in executor.running
    value = executor.event_buffer[KEY]
    assert isinstance(value, tuple) and len(value) == 2
    state, info, details = _details(executor)
    assert state == TaskInstanceState.FAILED
    assert str(info) == "pod-123" and unwrap_event_info(info) == "pod-123"
    assert details.failure_cause is TaskFailureCause.INFRA
    assert details.failure_reason == "Pod evicted: node drained"


def test_change_state_accepts_the_cause():
    executor = BaseExecutor()
    executor.change_state(
        KEY, TaskInstanceState.FAILED, None, failure_cause=TaskFailureCause.TIMEOUT
    )
    _, info, details = _details(executor)
    assert details.failure_cause is TaskFailureCause.TIMEOUT
    assert str(info) == "timeout"


@pytest.mark.parametrize(
    "report",
    [
        pytest.param(lambda ex: ex.fail(KEY, "worker lost"), id="fail(key, info)"),
        pytest.param(
            lambda ex: ex.event_buffer.__setitem__(
                KEY, (TaskInstanceState.FAILED, "worker lost")
            ),
            id="event_buffer[key] = (FAILED, info)",
        ),
        pytest.param(
            lambda ex: ex.change_state(KEY, TaskInstanceState.FAILED, "worker lost"),
            id="change_state",
        ),
    ],
)
def test_executors_without_a_cause_report_unknown(report):
    executor = BaseExecutor()
    report(executor)
    _, info, details = _details(executor)
    assert info == "worker lost"  # untouched: exactly what the executor wrote
    assert details.failure_cause is TaskFailureCause.UNKNOWN
    assert details.failure_reason == "worker lost"


def test_old_signature_override_keeps_working_with_a_cause():
    executor = OldStyleOverride()
    executor.fail(
        KEY, None, failure_cause="infra", failure_reason="spot instance reclaimed"
    )
    _, _, details = _details(executor)
    assert details.failure_cause is TaskFailureCause.INFRA
    assert details.failure_reason == "spot instance reclaimed"


def test_invalid_cause_is_rejected():
    with pytest.raises(ValueError, match="Invalid failure cause 'disk_full'"):
        BaseExecutor().fail(KEY, failure_cause="disk_full")


def test_reason_is_bounded_and_reason_alone_means_unknown():
    executor = BaseExecutor()
    executor.fail(KEY, failure_reason="x" * 5000)
    _, _, details = _details(executor)
    assert details.failure_cause is TaskFailureCause.UNKNOWN
    assert len(details.failure_reason) == FAILURE_REASON_MAX_LENGTH


def test_non_failed_events_are_not_wrapped():
    executor = BaseExecutor()
    executor.change_state(
        KEY, TaskInstanceState.QUEUED, "external-id-1", failure_cause="infra"
    )
    executor.success(TaskInstanceKey("dag", "other", "run", 1, -1), "done")
    buffer = executor.get_event_buffer()
    assert buffer[KEY] == (TaskInstanceState.QUEUED, "external-id-1")
    assert failure_details_from_event(*buffer[KEY]) is None


def test_the_cause_lives_and_dies_with_its_event():
    """Nothing outlives the event: no side table holds causes once the buffer is consumed."""
    executor = BaseExecutor()
    for i in range(1000):
        key = TaskInstanceKey("dag", f"t{i}", "run", 1, -1)
        executor.fail(key, failure_cause="infra", failure_reason=f"lost {i}")
    assert len(executor.get_event_buffer()) == 1000
    gc.collect()
    assert executor.event_buffer == {}
    assert not [o for o in gc.get_objects() if isinstance(o, ExecutorFailureInfo)]
    assert not [
        name
        for name, value in vars(executor).items()
        if isinstance(value, dict) and value and name != "attempts"
    ]
