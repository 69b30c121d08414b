"""
The Dags of the container OOM tests (tests/image/test_oom_celery_e2e.py, test_oom_local_e2e.py, issue 37).

* ``oom_detect``: ``allocate`` allocates about 1 GiB (``OOM_ALLOC_MIB``) on queue ``default`` with no
  retries; under a smaller container memory limit the kernel OOM-kills its task process.
* ``oom_after``: a small task on queue ``default`` that returns its host name: the worker that
  survived the kill runs it.
* ``oom_controls``, one task after the other (a counter is per container: an OOM kill while another
  task is killed from outside would read as OOM for both):
  ``killed_from_outside`` writes its pid to ``$OOM_OUT/<run id>.pid`` and waits; the test kills it
  with ``kill -9`` from outside the task (``podman exec``), with no OOM. ``raises_memory_error``
  raises ``MemoryError`` without allocating anything.

Every task writes one JSON line to ``$OOM_OUT/<run id>.jsonl`` when it starts.
"""

from __future__ import annotations

import json
import os
import socket
import time
from datetime import datetime

from airflow.sdk import DAG, chain, task

OUT = os.environ.get("OOM_OUT", "/out")
ALLOC_MIB = int(os.environ.get("OOM_ALLOC_MIB", "1024"))
CHUNK_MIB = 32


def record(run_id: str, **event) -> None:
    with open(os.path.join(OUT, f"{run_id.replace(':', '_')}.jsonl"), "a") as f:
        f.write(
            json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "t": time.time(), **event}) + "\n"
        )


def allocate(mib: int) -> int:
    """Allocate and touch ``mib`` MiB (every page written, so it is resident); the MiB held."""
    chunks = [bytearray(b"\x01") * (CHUNK_MIB << 20) for _ in range(mib // CHUNK_MIB)]
    return len(chunks) * CHUNK_MIB


with DAG("oom_detect", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(queue="default", retries=0)
    def allocate_1gib(run_id=None, ti=None):
        record(run_id, task="allocate_1gib", try_number=ti.try_number, start=True)
        return allocate(ALLOC_MIB)

    allocate_1gib()


with DAG("oom_after", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(queue="default", retries=0)
    def small(run_id=None):
        record(run_id, task="small", start=True)
        return socket.gethostname()

    small()


with DAG("oom_controls", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, max_active_tasks=1):

    @task(queue="default", retries=0)
    def killed_from_outside(run_id=None):
        record(run_id, task="killed_from_outside", start=True)
        with open(os.path.join(OUT, f"{run_id.replace(':', '_')}.pid"), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)

    @task(queue="default", retries=0, trigger_rule="all_done")
    def raises_memory_error(run_id=None):
        record(run_id, task="raises_memory_error", start=True)
        raise MemoryError("cannot allocate the lookup table")

    chain(killed_from_outside(), raises_memory_error())
