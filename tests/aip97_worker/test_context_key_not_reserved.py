"""
``failure_cause`` is in the callback context (AIP-97), but it is not a reserved task argument name.

The ``@task`` decorator refuses a callable whose parameter named like a context key has a default
other than ``None``, and refuses mapping over such a parameter (``expand()`` / ``partial()``). AIP-97 added
``failure_cause`` to the SDK ``Context``; had it become a known context key, Dags written before it
(``@task def f(failure_cause="...")``, ``f(failure_cause=x)``, ``f.expand(failure_cause=[...])``)
would fail to parse. This Dag uses all of those forms and has a failing task whose
``on_failure_callback`` reads ``context["failure_cause"]``; it is parsed with a real ``DagBag`` and
run with ``dag.test()`` (the real task runner, in process) in an isolated Airflow.
"""

from __future__ import annotations

import pytest
from harness import run_isolated_script

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SCRIPT = r'''
import json, os, pathlib, textwrap

home = pathlib.Path(os.environ["AIRFLOW_HOME"])
seen_file = home / "seen.json"
dags = home / "dags"
dags.mkdir()
(dags / "reserved_key.py").write_text(textwrap.dedent(f"""
    import datetime, json, pathlib

    from airflow.sdk import DAG, task

    SEEN = pathlib.Path({str(seen_file)!r})

    def record(name, value):
        seen = json.loads(SEEN.read_text()) if SEEN.exists() else {{}}
        seen[name] = value
        SEEN.write_text(json.dumps(seen))

    def on_failure(context):
        record("callback", str(context["failure_cause"]))

    with DAG("reserved_key", schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False):

        @task
        def takes_failure_cause(failure_cause=None):
            record(f"arg:{{failure_cause}}", failure_cause)

        @task
        def with_default(failure_cause="from-default"):
            record("default", failure_cause)

        @task(retries=0, on_failure_callback=on_failure)
        def boom():
            raise ValueError("boom")

        takes_failure_cause()
        takes_failure_cause.override(task_id="passed")(failure_cause="passed-in")
        with_default()
        takes_failure_cause.override(task_id="mapped").expand(failure_cause=["m1", "m2"])
        boom()
"""))

from airflow.dag_processing.dagbag import DagBag
from airflow.utils import db

db.initdb()
bag = DagBag(str(dags))
out = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()}}
if not bag.import_errors:
    run = bag.get_dag("reserved_key").test()
    out["states"] = {
        ti.task_id + (f"[{ti.map_index}]" if ti.map_index >= 0 else ""): str(ti.state)
        for ti in run.get_task_instances()
    }
    out["seen"] = json.loads(seen_file.read_text())
print(json.dumps(out), flush=True)
# 3.4's async SQLite pool logs a MissingGreenlet traceback to stdout when the interpreter closes its
# connections at exit, after our JSON line; run_isolated_script reads the last line, so end here.
os._exit(0)
'''


def test_failure_cause_task_argument_parses_runs_and_callbacks_see_the_cause(tmp_path):
    out = run_isolated_script(SCRIPT, tmp_path, timeout=280)

    assert out["import_errors"] == {}
    assert out["states"] == {
        "takes_failure_cause": "success",
        "passed": "success",
        "with_default": "success",
        "mapped[0]": "success",
        "mapped[1]": "success",
        "boom": "failed",
    }
    seen = out["seen"]
    # The task's own argument: the default, the value passed in, or the mapped value; never a cause.
    assert seen["arg:None"] is None
    assert seen["arg:passed-in"] == "passed-in"
    assert seen["default"] == "from-default"
    assert (seen["arg:m1"], seen["arg:m2"]) == ("m1", "m2")
    # The failure callback still gets the cause.
    assert seen["callback"] == "application"
