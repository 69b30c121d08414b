# Licensed to the Apache Software Foundation (ASF) under one
# or more contributor license agreements.  See the NOTICE file
# distributed with this work for additional information
# regarding copyright ownership.  The ASF licenses this file
# to you under the Apache License, Version 2.0 (the
# "License"); you may not use this file except in compliance
# with the License.  You may obtain a copy of the License at
#
#   http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an
# "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
# KIND, either express or implied.  See the License for the
# specific language governing permissions and limitations
# under the License.
"""
Out of memory as a failure cause: OOM detection and a retry rule, with the LocalExecutor.

Run it with the LocalExecutor (``make demo`` does) and read each try's ``failure_cause`` and
``failure_reason`` (REST API v2 task instance tries, the UI's Details tab):

``memory_cgroup``
    Reads what the supervisor reads: the memory cgroup this worker runs in, its ``oom_kill``
    counter (cgroup v2 ``memory.events``, v1 ``memory.oom_control``) and its limit. It returns them,
    with whether an OOM kill can be shown here and, if not, why (its XCom).

``allocate_past_the_limit``
    Where the worker's memory cgroup has a limit of its own of at most 4 GiB (a container started
    with ``--memory``), it allocates 256 MiB past the limit, so the kernel's OOM killer kills its task
    process. Expected: ``failed`` on try 1 with cause ``oom`` and the reason
    ``OOM-killed: memory cgroup limit <limit> (oom_kill 0 -> 1). ...``. Its retry policy
    ``RetryRule(cause="oom", action=RetryAction.FAIL)`` fails it at once: it has ``retries=2``, but
    another try with the same memory would be killed again. Elsewhere it skips itself, saying why:
    with no limit (a host, or a container without ``--memory``) the OOM killer would pick among the
    machine's processes, and the demo creates no cgroups and sets no limits. The container tests
    (tests/image/test_oom_local_e2e.py, test_oom_celery_e2e.py) show the kill under a real limit.

``killed_by_sigkill``
    Kills its own task process with ``SIGKILL``: a kill from outside the kernel's OOM killer.
    Expected: ``failed``, cause ``unknown`` (not ``oom``), the reason saying the counter did not rise
    (or why no counter could be read).

``raises_memory_error``
    Raises ``MemoryError`` from task code without running out of memory. Expected: ``failed``, cause
    ``application``: the exception is the task's own, not an OOM kill.
"""

from __future__ import annotations

import os
import signal
from datetime import datetime

from airflow.sdk import DAG, task
from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction, RetryRule
from airflow.sdk.exceptions import AirflowSkipException

#: The largest limit the demo allocates past: more would take the demo too long.
MAX_LIMIT = 4 << 30

OOM_FAILS = ExceptionRetryPolicy(
    rules=[RetryRule(cause="oom", action=RetryAction.FAIL, reason="needs more memory, not another try")]
)

with DAG(
    dag_id="oom_detection",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["example", "oom"],
    max_active_tasks=1,
):

    @task(retries=0)
    def memory_cgroup() -> dict:
        from airflow.sdk.execution_time.oom_evidence import MemoryCgroup, find_memory_cgroup, format_bytes

        found = find_memory_cgroup()
        if not isinstance(found, MemoryCgroup):
            return {"counter": None, "can_oom": False, "why": f"no OOM-kill counter can be read: {found}"}
        limit = found.read_limit()
        seen = {
            "counter": str(found.counter_file),
            "oom_kill": found.read_oom_kills(),
            "limit": format_bytes(limit) if limit else None,
            "can_oom": False,
        }
        if limit is None:
            seen["why"] = (
                f"{found.path} has no memory limit, so an allocation would take the machine's memory, and "
                "the demo creates no cgroups; run it in a container with --memory (at most 4 GiB) to see one"
            )
        elif limit > MAX_LIMIT:
            seen["why"] = (
                f"the limit, {format_bytes(limit)}, is above the {format_bytes(MAX_LIMIT)} the demo allocates past"
            )
        else:
            seen.update(can_oom=True, allocate_mib=(limit >> 20) + 256)
        return seen

    @task(retries=2, retry_policy=OOM_FAILS)
    def allocate_past_the_limit(seen: dict) -> int:
        if not seen["can_oom"]:
            raise AirflowSkipException(f"no OOM kill shown here: {seen['why']}")
        chunks = [bytearray(b"\x01") * (32 << 20) for _ in range(seen["allocate_mib"] // 32 + 1)]
        return len(chunks)

    @task(retries=0, trigger_rule="all_done")
    def killed_by_sigkill():
        os.kill(os.getpid(), signal.SIGKILL)

    @task(retries=0, trigger_rule="all_done")
    def raises_memory_error():
        raise MemoryError("cannot allocate the lookup table")

    seen = memory_cgroup()
    allocate_past_the_limit(seen) >> killed_by_sigkill() >> raises_memory_error()
