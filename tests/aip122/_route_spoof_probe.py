"""
Send a worker-reported ``infra`` failure straight to the real Execution API route (AIP-97/AIP-122).

Run by test_worker_guarantees_e2e.py with the stack's environment (``[core] max_infra_retries=1``);
it drives ``ti_update_state`` through ``InProcessExecutionAPI`` on the stack's PostgreSQL database
and prints one JSON document. The task instances of a finished ``aip122_route_probe`` run are put
back to ``running`` first, so that the transitions are valid.
"""

from __future__ import annotations

import importlib
import json
import sys
from datetime import datetime, timezone

from sqlalchemy import select, update

from airflow.api_fastapi.execution_api.app import InProcessExecutionAPI
from airflow.models.taskinstance import TaskInstance as TI
from airflow.utils.session import create_session

DAG = "aip122_route_probe"
NOW = datetime.now(tz=timezone.utc).isoformat()


def ti_row(task_id):
    with create_session() as session:
        ti = session.scalars(select(TI).where(TI.dag_id == DAG, TI.task_id == task_id)).one()
        return {
            "id": str(ti.id),
            "state": ti.state,
            "try_number": ti.try_number,
            "max_tries": ti.max_tries,
            "infra_retry_count": ti.infra_retry_count,
            "failure_cause": ti.failure_cause,
            "failure_reason": ti.failure_reason,
        }


transport = InProcessExecutionAPI().transport
# The HTTP library of the in-process transport (httpx on 3.3, httpx2 on 3.4).
httpx = importlib.import_module(type(transport).__module__.partition(".")[0])
client = httpx.Client(transport=transport, base_url="http://in-process.invalid./")
out: dict = {}
for task_id in ("probe_failed", "probe_retry"):
    with create_session() as session:
        session.execute(update(TI).where(TI.dag_id == DAG, TI.task_id == task_id).values(state="running"))
    out[f"{task_id}_before"] = ti_row(task_id)

bodies = {
    "probe_failed": {"state": "failed", "end_date": NOW, "failure_cause": "infra", "failure_reason": "forged"},
    "probe_retry": {
        "state": "up_for_retry",
        "end_date": NOW,
        "failure_cause": "infra",
        "failure_reason": "forged retry",
    },
}
for task_id, body in bodies.items():
    resp = client.patch(
        f"task-instances/{out[f'{task_id}_before']['id']}/state",
        json=body,
        headers={"Airflow-API-Version": "2026-11-30"},
    )
    out[task_id] = {"status": resp.status_code, "body": resp.text[:2000], "ti": ti_row(task_id)}

json.dump(out, sys.stdout, default=str)
