"""
Drive the real Execution API (InProcessExecutionAPI, real DB) with AIP-97 failure payloads.

Run by test_execution_api_failure_fields.py with the stack's environment; prints one JSON document.
``$AIP97_PAST_TRIES`` is the test's ``lines.PAST_TRIES`` (where the line keeps archived tries) and
``$AIP97_LINE`` its ``lines.LINE``.
The task instances of a finished ``aip97w_api`` run are put back to ``running`` first, so that the
state transitions below are valid.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

from sqlalchemy import select, text, update

from airflow.api_fastapi.execution_api.app import InProcessExecutionAPI
from airflow.models.taskinstance import TaskInstance as TI
from airflow.utils.session import create_session

DAG = "aip97w_api"
OLD, NEW = "2026-06-30", "2026-11-30"
NOW = datetime.now(tz=timezone.utc).isoformat()
PAST_TRIES = os.environ["AIP97_PAST_TRIES"]

if os.environ["AIP97_LINE"] == "3.3":
    import httpx
else:
    # 3.4's InProcessExecutionAPI.transport is an httpx2 transport (the 1.4 Task SDK client is httpx2).
    import httpx2 as httpx


def ti_row(task_id):
    with create_session() as session:
        ti = session.scalars(select(TI).where(TI.dag_id == DAG, TI.task_id == task_id)).one()
        return {
            "id": str(ti.id),
            "state": ti.state,
            "try_number": ti.try_number,
            "failure_cause": ti.failure_cause,
            "failure_reason": ti.failure_reason,
        }


def set_state(task_id, state):
    with create_session() as session:
        session.execute(update(TI).where(TI.dag_id == DAG, TI.task_id == task_id).values(state=state))


client = httpx.Client(transport=InProcessExecutionAPI().transport, base_url="http://in-process.invalid./")


def patch_state(task_id, body, version):
    resp = client.patch(
        f"task-instances/{ti_row(task_id)['id']}/state", json=body, headers={"Airflow-API-Version": version}
    )
    return {"status": resp.status_code, "body": resp.text[:2000]}


out: dict = {}
for task_id in ("api_a", "api_b", "api_c", "api_d"):
    set_state(task_id, "running")

# An old client (2026-06-30) knows nothing about failure_cause: its failure still lands.
out["old_failed"] = patch_state("api_a", {"state": "failed", "end_date": NOW}, OLD)
out["old_failed_ti"] = ti_row("api_a")
out["new_invalid_cause"] = patch_state(
    "api_b", {"state": "failed", "end_date": NOW, "failure_cause": "gremlins"}, NEW
)
out["new_cause_on_skipped"] = patch_state(
    "api_b", {"state": "skipped", "end_date": NOW, "failure_cause": "infra"}, NEW
)
out["new_failed"] = patch_state(
    "api_b",
    {"state": "failed", "end_date": NOW, "failure_cause": "infra", "failure_reason": "x" * 1500},
    NEW,
)
out["new_failed_ti"] = ti_row("api_b")
out["old_retry"] = patch_state("api_d", {"state": "up_for_retry", "end_date": NOW}, OLD)
out["old_retry_ti"] = ti_row("api_d")

before_retry = ti_row("api_c")
out["new_retry"] = patch_state(
    "api_c",
    {"state": "up_for_retry", "end_date": NOW, "failure_cause": "application", "failure_reason": "E: r"},
    NEW,
)
out["new_retry_ti"] = ti_row("api_c")
with create_session() as session:
    tih = session.execute(
        text(
            f"SELECT failure_cause, failure_reason FROM {PAST_TRIES} "
            "WHERE dag_id = :d AND task_id = 'api_c' AND try_number = :t"
        ),
        {"d": DAG, "t": before_retry["try_number"]},
    ).one()
    out["new_retry_tih"] = {"failure_cause": tih.failure_cause, "failure_reason": tih.failure_reason}

# A new try starts clean.
set_state("api_c", "queued")
resp = client.patch(
    f"task-instances/{ti_row('api_c')['id']}/run",
    json={"state": "running", "hostname": "h", "unixname": "u", "pid": 1, "start_date": NOW},
    headers={"Airflow-API-Version": NEW},
)
out["run"] = {"status": resp.status_code}
out["run_ti"] = ti_row("api_c")

print(json.dumps(out, default=str), flush=True)
# 3.4's async DB pool logs a MissingGreenlet traceback to stdout when the interpreter closes its
# connections at exit, after the JSON line the test reads: end here.
os._exit(0)
