"""on_task_instance_failed gains failure_cause; listeners written before it keep being called.

Uses Airflow's real ListenerManager with the real task-instance hookspecs (without the plugins of
whatever AIRFLOW_HOME the test process has).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from airflow._shared.listeners.listener import ListenerManager
from airflow._shared.listeners.spec import taskinstance
from airflow._shared.state.failure import TaskFailureCause
from airflow.listeners import hookimpl
from airflow.utils.state import TaskInstanceState


class PreAip97Listener:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    @hookimpl
    def on_task_instance_failed(self, previous_state, task_instance, error):
        self.calls.append((previous_state, task_instance.task_id, error))


class CauseAwareListener:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    @hookimpl
    def on_task_instance_failed(
        self, previous_state, task_instance, error, failure_cause
    ):
        self.calls.append((task_instance.task_id, failure_cause))


@pytest.fixture
def manager() -> ListenerManager:
    manager = ListenerManager()
    manager.add_hookspecs(taskinstance)
    return manager


def test_old_and_new_listeners_are_both_called(manager):
    old, new = PreAip97Listener(), CauseAwareListener()
    manager.add_listener(old)
    manager.add_listener(new)
    try:
        ti = SimpleNamespace(task_id="t1")
        manager.hook.on_task_instance_failed(
            previous_state=TaskInstanceState.RUNNING,
            task_instance=ti,
            error="boom",
            failure_cause=TaskFailureCause.TIMEOUT,
        )
        manager.hook.on_task_instance_failed(
            previous_state=None,
            task_instance=ti,
            error="marked failed",
            failure_cause=None,
        )
    finally:
        manager.clear()
    assert old.calls == [
        (TaskInstanceState.RUNNING, "t1", "boom"),
        (None, "t1", "marked failed"),
    ]
    assert new.calls == [("t1", TaskFailureCause.TIMEOUT), ("t1", None)]


def test_hookspec_declares_failure_cause(manager):
    spec = manager.hook.on_task_instance_failed.spec
    # AIP-97 appends failure_cause after upstream's arguments; a later feature of the series may append
    # its own after it (retry-rules: retry_rule), never before.
    assert spec.argnames[:4] == (
        "previous_state",
        "task_instance",
        "error",
        "failure_cause",
    )
