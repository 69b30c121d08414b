"""
Dags for tests/aip122/test_resumable_job_e2e.py: a lost worker costs neither a user retry nor the job.

* ``aip122_resumable_job``: an operator built on upstream's ``ResumableJobMixin`` (AIP-103) submits
  a job to the test's external job service (its URL in ``$AIP122G_OUT/job_service.url``) and polls it
  every 0.5 s. ``retries=0`` and ``max_infra_retries=1``: the user has no retry to spend. While it
  polls, each try appends ``{"try", "supervisor", "external_id"}`` to ``$AIP122G_OUT/resumable.jsonl``
  (and its own pid) once, so that the test can SIGKILL that try's supervisor (the LocalExecutor
  worker process).
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from datetime import datetime
from typing import Any

from airflow.sdk import DAG, BaseOperator
from airflow.sdk.bases.resumablejobmixin import ResumableJobMixin

OUT = os.environ.get("AIP122G_OUT", "/tmp")


def _service() -> str:
    with open(os.path.join(OUT, "job_service.url")) as f:
        return f.read().strip()


def _call(method: str, path: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{_service()}{path}", method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


class ExternalJobOperator(ResumableJobMixin, BaseOperator):
    """Drive one job of the test's job service; reconnect to it on the next try (ResumableJobMixin)."""

    external_id_key = "external_job_id"

    def execute(self, context):
        return self.execute_resumable(context)

    def submit_job(self, context):
        return _call("POST", "/jobs")["id"]

    def get_job_status(self, external_id, context) -> str:
        return _call("GET", f"/jobs/{external_id}")["status"]

    def is_job_active(self, status: str) -> bool:
        return status == "RUNNING"

    def is_job_succeeded(self, status: str) -> bool:
        return status == "SUCCEEDED"

    def poll_until_complete(self, external_id, context) -> None:
        ti = context["ti"]
        with open(os.path.join(OUT, "resumable.jsonl"), "a") as f:
            record = {
                "try": ti.try_number,
                "pid": os.getpid(),
                "supervisor": os.getppid(),
                "external_id": external_id,
            }
            f.write(json.dumps(record) + "\n")
        while (status := self.get_job_status(external_id, context)) == "RUNNING":
            time.sleep(0.5)
        if status != "SUCCEEDED":
            raise RuntimeError(f"external job {external_id} ended {status}")

    def get_job_result(self, external_id, context):
        return external_id


with DAG("aip122_resumable_job", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    ExternalJobOperator(task_id="drive_job", retries=0, max_infra_retries=1)
