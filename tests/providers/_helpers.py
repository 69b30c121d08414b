"""Small helpers shared by the AIP-97 provider tests."""

from __future__ import annotations

from typing import Any

import lines

#: The Redis database numbers of this line's Celery tests (test_celery_e2e.py, then
#: test_celery_failure_cause.py and the modules that share its fixture). The 3.3 and 3.4 suites may
#: run at the same time against the one Redis of .ci/services.sh, and each test flushes its database.
REDIS_DBS: dict[str, tuple[int, int]] = {"3.3": (12, 13), "3.4": (14, 15)}
REDIS_DB_E2E, REDIS_DB_IN_PROCESS = REDIS_DBS[lines.LINE]



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
