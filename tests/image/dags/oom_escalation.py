"""
The escalation Dag of tests/image/test_oom_celery_e2e.py (issue 37 §3, §4).

``oom_escalate.allocate_1gib`` allocates about 1 GiB on queue ``default`` (a worker with a 512 MiB
limit), so its first try is OOM-killed; its retry policy's rule retries an ``oom`` on queue
``highmem`` (a worker with 2 GiB), where the allocation fits and the try succeeds. A file of its own:
until ``MemoryEscalation`` exists the import fails here only, and the Dags of oom_container.py parse.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task
from airflow.sdk.definitions.retry_policy import (
    ExceptionRetryPolicy,
    MemoryEscalation,
    RetryAction,
    RetryRule,
)

ALLOC_MIB = int(os.environ.get("OOM_ALLOC_MIB", "1024"))
CHUNK_MIB = 32

OOM_TO_HIGHMEM = ExceptionRetryPolicy(
    rules=[RetryRule(cause="oom", action=RetryAction.RETRY, escalate=MemoryEscalation(queue="highmem"))]
)

with DAG("oom_escalate", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(queue="default", retries=1, retry_delay=timedelta(seconds=1), retry_policy=OOM_TO_HIGHMEM)
    def allocate_1gib():
        chunks = [bytearray(b"\x01") * (CHUNK_MIB << 20) for _ in range(ALLOC_MIB // CHUNK_MIB)]
        return len(chunks) * CHUNK_MIB

    allocate_1gib()
