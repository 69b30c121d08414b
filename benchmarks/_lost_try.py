"""
What the lost-try benchmarks share (``aip122_recovery.py``, ``celery_worker_restart.py`` and, through
the latter, ``celery_worker_restart_containers.py``): their Dag, whose one task records when each try
starts, and the outcome read from the stack's database once the task has succeeded.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

import harness  # noqa: E402

_DAG_TEMPLATE = '''
import json, os, signal, time
from datetime import datetime
from airflow.sdk import DAG, task

OUT = os.environ["{out_var}"]


def record(event):
    with open(os.path.join(OUT, "events.jsonl"), "a") as f:
        f.write(json.dumps(event) + "\\n")


with DAG("{dag_id}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=1)
    def {task_id}(ti=None):
        record({{"try_number": ti.try_number, "started": time.time()}})
        if ti.try_number == 1:
{first_try}
        return "ok"

    {task_id}()
'''


def dag_file(dag_id: str, task_id: str, out_var: str, first_try: str) -> str:
    """A Dag with one task (``retries=1``) that appends ``{"try_number", "started"}`` to
    ``$<out_var>/events.jsonl`` when a try starts, then runs ``first_try`` (statements; ``record(event)``
    appends another event) on its first try, and succeeds on the next."""
    body = textwrap.indent(textwrap.dedent(first_try).strip(), " " * 12)
    return _DAG_TEMPLATE.format(dag_id=dag_id, task_id=task_id, out_var=out_var, first_try=body)


def events(out: Path) -> list[dict[str, Any]]:
    """The events the Dag's task wrote (``out`` is the stack's ``out``, or a deployment's out directory)."""
    return harness.read_jsonl(Path(out) / "events.jsonl")


def outcome(stack: harness.Stack, dag_id: str, *, timeout: float = 120) -> dict[str, Any]:
    """Wait until the task has succeeded; its final try's counters, and try 1's cause and end (epoch s).

    Read with SQL (``stack.tries``): an unpatched database has no AIP-97/AIP-122 columns (``None``).
    """
    stack.wait_ti(dag_id, None, {"success"}, timeout=timeout)
    tries = stack.tries(dag_id)
    try1, live = tries[0], tries[-1]
    return {
        **{key: live.get(key) for key in ("state", "try_number", "max_tries", "infra_retry_count")},
        "try1_cause": str(try1.get("failure_cause")),
        "try1_ended": try1["end_date"].timestamp(),
    }
