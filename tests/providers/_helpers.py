"""Small helpers shared by the AIP-97 provider tests."""

from __future__ import annotations

from typing import Any


def core_supports_failure_cause() -> bool:
    from airflow.executors.base_executor import BaseExecutor

    return bool(getattr(BaseExecutor, "supports_failure_cause", False))


def event_failure(state: Any, info: Any) -> tuple[str | None, str | None]:
    """
    Return ``(cause, reason)`` the scheduler of the installed core reads from a FAILED event.

    On a core without AIP-97 there is no cause: ``(None, str(info))``.
    """
    if not core_supports_failure_cause():
        return None, None if info is None else str(info)
    from airflow.executors.failure_info import failure_details_from_event

    details = failure_details_from_event(state, info)
    assert details is not None, f"not a failed event: {state!r}"
    return details.failure_cause.value, details.failure_reason
