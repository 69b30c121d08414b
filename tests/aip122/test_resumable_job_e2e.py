"""
End to end: a lost worker costs neither a user retry nor the external job it was driving (LocalExecutor).

AIP-97 records the loss of the worker as ``infra``, AIP-122 retries it without spending the task's
``retries``, and upstream's AIP-103 ``ResumableJobMixin`` reconnects the next try to the job whose id
the lost try stored in ``task_state_store``. On the directory's ``e2e_stack`` (``max_infra_retries =
1``, ``infra_retry_delay = 1``, a 300 s heartbeat timeout) this module runs one scheduler with the
LocalExecutor and an external job service of its own (a real HTTP server in the test process, each
job running 12 s). Dag: ``dags/aip122_resumable_dags.py`` (``retries=0``).

The test SIGKILLs try 1's supervisor, the LocalExecutor worker process, while the try polls its job:
the LocalExecutor's worker monitoring fails the try as ``infra`` at once, and the task process dies
with its supervisor, so the orphaned try can never poll or cancel the job after try 2 owns it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from harness import FINISHED, Stack, process_gone

JOB_SECONDS = 12.0
TRY_COLUMNS = "try_number, state, failure_cause, failure_reason, infra_retry_count, max_tries"


class JobService:
    """An external system's job API: ``POST /jobs`` submits, ``GET /jobs/<id>`` polls (RUNNING, SUCCEEDED)."""

    def __init__(self) -> None:
        self.jobs: dict[str, float] = {}
        self.polls: list[tuple[str, float]] = []
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, body: dict[str, Any], status: int = 200) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                with service._lock:
                    job_id = f"job-{len(service.jobs) + 1}"
                    service.jobs[job_id] = time.time()
                self._reply({"id": job_id}, 201)

            def do_GET(self) -> None:
                job_id = self.path.rsplit("/", 1)[-1]
                with service._lock:
                    started = service.jobs.get(job_id)
                    service.polls.append((job_id, time.time()))
                if started is None:
                    self._reply({"status": "MISSING"}, 404)
                    return
                done = time.time() - started >= JOB_SECONDS
                self._reply({"status": "SUCCEEDED" if done else "RUNNING"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> JobService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def stack(e2e_stack: Stack) -> Iterator[Stack]:
    """The shared stack plus this module's scheduler (``max_infra_retries = 1`` from the stack)."""
    e2e_stack.start_component("scheduler", name="scheduler", config={"AIRFLOW__CORE__PARALLELISM": "4"})
    yield e2e_stack
    e2e_stack.stop("scheduler")


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_a_lost_worker_costs_neither_a_user_retry_nor_the_external_job(stack: Stack):
    dag_id = "aip122_resumable_job"
    with JobService() as service:
        (stack.out / "job_service.url").write_text(service.url)
        stack.trigger(dag_id)
        first = stack.wait_for(
            lambda: next((r for r in stack.jsonl("resumable.jsonl") if r["try"] == 1), None),
            timeout=120,
            what="try 1 polling its job",
            logs=("scheduler", "dag-processor"),
        )
        # The worker is lost while the try polls: its supervisor (the LocalExecutor worker) is killed.
        os.kill(first["supervisor"], signal.SIGKILL)
        lost_at = time.time()
        ti = stack.wait_for(
            lambda: (row := stack.ti(dag_id)) and row["state"] in FINISHED and row,
            timeout=120,
            what=f"{dag_id} finished",
            logs=("scheduler", "dag-processor"),
        )
        records = stack.jsonl("resumable.jsonl")
        polls = list(service.polls)
        submitted = dict(service.jobs)

    tries = stack.tries(dag_id, columns=TRY_COLUMNS)
    # Exactly one job was submitted: try 2 reconnected to try 1's job instead of submitting another.
    assert list(submitted) == [first["external_id"]], submitted
    assert [(r["try"], r["external_id"]) for r in records] == [(1, first["external_id"]), (2, first["external_id"])]
    # Try 1 is infra, try 2 succeeded; the user's retries (0) were not spent: the one retry was infra.
    assert [(t["try_number"], t["failure_cause"]) for t in tries] == [(1, "infra"), (2, None)], tries
    assert ti["state"] == "success", ti
    assert ti["infra_retry_count"] == 1
    user_retries_spent = (ti["try_number"] - 1) - ti["infra_retry_count"]
    assert user_retries_spent == 0
    # The orphaned try's process died with its supervisor: it polls no more once try 2 polls.
    assert process_gone(first["supervisor"]) and process_gone(first["pid"])
    try2_first_poll = min(t for job, t in polls if t > lost_at)
    print(
        f"try 2 reconnected to {first['external_id']} {try2_first_poll - lost_at:.1f}s after the worker "
        f"was lost; jobs submitted: {len(submitted)}; user retries spent: {user_retries_spent}"
    )
