"""Small helpers shared by the AIP-97 provider tests."""

from __future__ import annotations

from typing import Any

import lines

#: The Redis database number of this line's in-process Celery tests (test_celery_failure_cause.py and
#: the modules that share its fixture). The 3.3 and 3.4 suites may run at the same time against the
#: one Redis of .ci/services.sh, and each test flushes its database. (The end-to-end tests run a
#: private ``redis-server``: conftest.py's ``celery_stack``.)
REDIS_DBS: dict[str, int] = {"3.3": 13, "3.4": 15}
REDIS_DB_IN_PROCESS = REDIS_DBS[lines.LINE]


def aip122_installed() -> bool:
    """Whether the installed core has AIP-122 (``[core] max_infra_retries`` in its config.yml)."""
    from pathlib import Path

    import yaml

    import airflow

    config_yml = Path(airflow.__file__).parent / "config_templates" / "config.yml"
    core = yaml.safe_load(config_yml.read_text())["core"]["options"]
    return "max_infra_retries" in core



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
