"""
The AIP-97 / AIP-122 UI in a real browser, against the patched Airflow.

Starts api-server, dag-processor and scheduler (LocalExecutor, PostgreSQL) from the patched venv,
with ``[core] max_infra_retries=1``, runs ``ui_failure_causes`` (one task per cause; one of them
loses its worker on try 1, is granted an infra retry and then fails in its own code), and loads the
Task Instance Details pages in headless Chromium (Debian's package, driven by the playwright-core
the UI's pnpm-lock.yaml pins). It asserts what the page *rendered*: the cause badge and reason of
the current try and of a past try picked by ``?try_number=``, and the infra retries "k of cap".
A screenshot of the Details page is kept in ``build/test-artifacts/ui/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(ROOT / "dev"))

import lines  # noqa: E402
from harness import Stack  # noqa: E402

DAG_ID = "ui_failure_causes"
ARTIFACTS = ROOT / "build" / "test-artifacts" / "ui"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

pytestmark = pytest.mark.e2e


def _rest(base: str, path: str) -> Any:
    import urllib.request

    with urllib.request.urlopen(f"{base}/api/v2{path}", timeout=30) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (.ci/run does)")
    with Stack(
        "t_ui_e2e",
        tmp_path_factory.mktemp("uie2e"),
        dags=[HERE / "dags" / "ui_failure_dags.py"],
        config={"AIRFLOW__CORE__MAX_INFRA_RETRIES": "1", "AIRFLOW__CORE__INFRA_RETRY_DELAY": "1"},
    ) as af:
        base = af.api_url
        af.trigger(DAG_ID)

        def finished():
            runs = _rest(base, f"/dags/{DAG_ID}/dagRuns")["dag_runs"]
            if not runs:
                return None
            run_id = runs[0]["dag_run_id"]
            tis = _rest(base, f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances")["task_instances"]
            done = len(tis) == 3 and all(t["state"] in ("failed", "success") for t in tis)
            return (run_id, {t["task_id"]: t for t in tis}) if done else None

        run_id, tis = af.wait_for(finished, timeout=240, interval=2, what="all tasks finished")
        yield {"base": base, "run_id": run_id, "tis": tis, "home": af.home}


def _ui_dir() -> Path:
    from pstool import ui

    _, ui_dir = ui.prepared_work(lines.TREE, "browser-test")
    return ui_dir


def _browse(pages: list[dict[str, Any]], tmp: Path) -> dict[str, Any]:
    from pstool import ui

    tc = ui.toolchain()
    spec, out = tmp / "pages.json", tmp / "out.json"
    spec.write_text(json.dumps(pages))
    proc = subprocess.run(
        [str(tc.node_bin / "node"), str(HERE / "browser.cjs"), str(_ui_dir()), str(spec), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "CHROMIUM": CHROMIUM},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


TOOLTIP_CAUSE = "[data-scope=tooltip][data-part=content] [data-testid=failure-cause-badge]"
READ = {
    "cause": "[data-testid=failure-cause-badge]",
    "reason": "[data-testid=failure-reason]",
    "infra": "[data-testid=infra-retries]",
    # 3.3 gives the cause its own "Failure Cause" row; 3.4 puts the cause and reason in its
    # "Reason for state" row, so that is the one row that must hold them.
    "causeRows": (
        "[data-testid=failure-cause-row]" if lines.LINE == lines.DEFAULT_LINE else "[data-testid=state-reason-row]"
    ),
}


def test_details_page_shows_cause_reason_and_infra_retries(stack: dict[str, Any], tmp_path: Path) -> None:
    tis = stack["tis"]
    # The REST API is the ground truth the page must render.
    assert tis["infra_then_application"]["failure_cause"] == "application"
    assert tis["infra_then_application"]["infra_retry_count"] == 1
    assert tis["infra_then_application"]["try_number"] == 2
    assert tis["times_out"]["failure_cause"] == "timeout"

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    ti_url = f"{stack['base']}/dags/{DAG_ID}/runs/{stack['run_id']}/tasks"
    pages = [
        {
            "name": "current",
            "url": f"{ti_url}/infra_then_application/details",
            "waitFor": READ["cause"],
            "read": READ,
            "screenshot": str(ARTIFACTS / "task-instance-details.png"),
        },
        {
            "name": "past",
            "url": f"{ti_url}/infra_then_application/details?try_number=1",
            "waitFor": "[data-cause=infra]",
            "read": READ,
            "screenshot": str(ARTIFACTS / "task-instance-details-try-1.png"),
        },
        {"name": "timeout", "url": f"{ti_url}/times_out/details", "waitFor": READ["cause"], "read": READ, "screenshot": None},
        {
            # The Grid: hovering a failed task's square shows its cause in the tooltip.
            "name": "grid",
            "url": f"{stack['base']}/dags/{DAG_ID}",
            "hover": f"[id='grid-{stack['run_id']}-times_out']",
            "waitFor": TOOLTIP_CAUSE,
            "read": {"cause": TOOLTIP_CAUSE},
            "screenshot": str(ARTIFACTS / "grid-tooltip.png"),
        },
        {
            # The Task Instances list: a Failure Cause column.
            "name": "list",
            "url": f"{stack['base']}/task_instances",
            "waitFor": READ["cause"],
            "read": {"cause": READ["cause"]},
            "screenshot": str(ARTIFACTS / "task-instances-list.png"),
        },
        {
            "name": "killed",
            "url": f"{ti_url}/task_process_killed/details",
            "waitFor": READ["cause"],
            "read": READ,
            "screenshot": None,
        },
    ]
    seen = _browse(pages, tmp_path)

    current, past = seen["current"], seen["past"]
    assert current["cause"] == ["Application"], current
    assert "no header row" in current["reason"][0], current
    assert current["infra"] == ["1 of 1"], current
    assert len(current["causeRows"]) == 1

    assert past["cause"] == ["Infrastructure"], past
    try_1 = _rest(
        stack["base"],
        f"/dags/{DAG_ID}/dagRuns/{stack['run_id']}/taskInstances/infra_then_application/tries/1",
    )
    assert try_1["failure_cause"] == "infra"
    assert try_1["failure_reason"] and past["reason"] == [try_1["failure_reason"]], past
    assert past["infra"] == [f"{try_1['infra_retry_count']} of 1"], past

    assert seen["timeout"]["cause"] == ["Timeout"], seen["timeout"]
    assert seen["grid"]["cause"] == ["Timeout"], seen["grid"]
    assert sorted(seen["list"]["cause"]) == sorted(
        {"application": "Application", "infra": "Infrastructure", "timeout": "Timeout", "unknown": "Unknown"}[
            t["failure_cause"]
        ]
        for t in tis.values()
    ), seen["list"]
    killed_cause = tis["task_process_killed"]["failure_cause"]
    assert seen["killed"]["cause"] == [{"infra": "Infrastructure", "unknown": "Unknown", "application": "Application"}[killed_cause]]
    assert (ARTIFACTS / "task-instance-details.png").stat().st_size > 10_000


def test_grid_endpoint_carries_the_cause_of_each_failed_task(stack: dict[str, Any]) -> None:
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode({"run_ids": stack["run_id"]})
    url = f"{stack['base']}/ui/grid/ti_summaries/{DAG_ID}?{query}"
    with urllib.request.urlopen(url, timeout=30) as resp:
        summaries = [json.loads(line) for line in resp.read().decode().splitlines() if line.strip()]
    nodes = {n["task_id"]: n for n in summaries[0]["task_instances"]}
    for task_id, ti in stack["tis"].items():
        assert nodes[task_id]["failure_cause"] == ti["failure_cause"], nodes[task_id]
