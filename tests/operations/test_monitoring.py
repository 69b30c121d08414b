"""
The monitoring assets in ``monitoring/`` checked with real tools (docs/operations.md, "Metrics").

- ``promtool check rules`` and ``promtool test rules`` (Debian's ``prometheus`` package, installed by
  ``.ci/services.sh``): each alert fires on a synthetic series and stays quiet without one; a copy of
  the rules with the thresholds raised makes the unit tests fail, so they test the thresholds.
- The Helm values example carries exactly ``monitoring/statsd-mappings.yml``.
- End to end: a real patched scheduler (LocalExecutor, ``dags/ops_state.py``) sends its StatsD lines
  to a receiver; the mappings turn them into Prometheus series (``statsd_mapping.py``, a stand-in
  for the statsd_exporter, which cannot be installed here); a real Prometheus scrapes them, and every
  Grafana panel's expression and every alert's expression (without its threshold) is evaluated over
  the Prometheus HTTP API and must return the series the panel is about.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from conftest import REPO
from statsd_mapping import Mapper

import harness

MONITORING = REPO / "monitoring"
RULES = MONITORING / "prometheus-rules.yml"
RULE_TESTS = MONITORING / "prometheus-rules.test.yml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
MAPPINGS = MONITORING / "statsd-mappings.yml"
HELM_VALUES = MONITORING / "helm-values.yaml"

#: Grafana's variables, as the evaluation sets them: a short range (the stack ran for a minute or
#: two) and every Dag.
GRAFANA_VARIABLES = {"$__rate_interval": "2m", "$__range": "2m", "$dag_id": ".*"}


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run .ci/services.sh (Debian's prometheus package)")
    return path


def _promtool(*args: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess:
    return subprocess.run([_tool("promtool"), *args], capture_output=True, text=True, cwd=cwd, timeout=120, check=False)


def test_promtool_check_rules() -> None:
    proc = _promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 3 rules found" in proc.stdout


def test_promtool_rule_unit_tests() -> None:
    proc = _promtool("test", "rules", str(RULE_TESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Each alert has a case where it fires and one where it stays quiet.
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired: dict[str, int] = {}
    quiet: dict[str, int] = {}
    for case in cases:
        for check in case["alert_rule_test"]:
            bucket = fired if check["exp_alerts"] else quiet
            bucket[check["alertname"]] = bucket.get(check["alertname"], 0) + 1
    names = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert set(fired) == set(quiet) == names


def test_rule_unit_tests_fail_when_a_threshold_changes(tmp_path: Path) -> None:
    rules = RULES.read_text()
    raised = re.sub(r"\) > (\d+)", lambda m: f") > {int(m.group(1)) * 1000 + 1}", rules)
    assert raised != rules
    (tmp_path / RULES.name).write_text(raised)
    shutil.copy(RULE_TESTS, tmp_path)
    proc = _promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert proc.returncode != 0
    for alert in ("AirflowInfraFailureSpike", "AirflowInfraRetryCapReached", "AirflowInfraRetryStorm"):
        assert f"alertname: {alert}" in proc.stdout + proc.stderr


def test_helm_values_carry_the_mappings() -> None:
    values = yaml.safe_load(HELM_VALUES.read_text())
    assert values["statsd"]["extraMappings"] == yaml.safe_load(MAPPINGS.read_text())["mappings"]
    assert values["config"]["metrics"]["statsd_influxdb_enabled"] == "True"
    assert values["config"]["core"]["max_infra_retries"] == "0"


def _dashboard_targets() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    targets = [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]
    assert targets
    return targets


def test_dashboard_queries_read_mapped_metrics() -> None:
    """Every panel reads a metric the mappings produce (the e2e test below evaluates them)."""
    names = {m["name"] for m in yaml.safe_load(MAPPINGS.read_text())["mappings"] if m.get("action") != "drop"}
    for title, expr in _dashboard_targets():
        used = set(re.findall(r"airflow_[a-z_]+", expr))
        assert used and used <= names, (title, used - names)


class _Exposition(BaseHTTPRequestHandler):
    """Serves the current exposition text as ``/metrics``: what the statsd_exporter would serve."""

    text: ClassVar[str] = ""

    def do_GET(self) -> None:
        body = _Exposition.text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:
        doc = json.load(resp)
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def _series(result: list[dict[str, Any]], label: str) -> set[str]:
    return {r["metric"].get(label, "") for r in result}


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_real_scheduler_lines_through_the_mappings_and_prometheus(patched_state_sqlite, tmp_path: Path) -> None:
    statsd_lines = patched_state_sqlite["statsd_lines"]
    mapper = Mapper(MAPPINGS)
    mapped = [m for m in (mapper.map_line(line) for line in statsd_lines) if m]

    # The real lines carry what the dashboard and the alerts group by.
    by_cause = {
        (labels["dag_id"], labels["failure_cause"]) for name, labels, _ in mapped if name.endswith("by_cause_total")
    }
    assert {
        ("ops_infra", "infra"),
        ("ops_cap", "infra"),
        ("ops_app", "application"),
        ("ops_timeout", "timeout"),
    } <= by_cause
    denied = {(labels["task_id"], labels["reason"]) for name, labels, _ in mapped if "denied" in name}
    assert denied == {("lose_always", "cap_reached"), ("opt_out", "task_opt_out")}, denied
    granted = [labels for name, labels, _ in mapped if "granted" in name]
    assert {(g["dag_id"], g["task_id"]) for g in granted} == {
        ("ops_infra", "lose_worker_once"),
        ("ops_cap", "lose_always"),
    }
    # The tagged ti.failure_cause duplicate is dropped: one count per failed try.
    failures = sum(v for name, _, v in mapped if name.endswith("by_cause_total"))
    assert failures == len([line for line in statsd_lines if re.match(r"airflow\.ti\.failure_cause\.\w+,", line)])

    exposition = mapper.exposition(statsd_lines)
    (tmp_path / "metrics.txt").write_text(exposition)
    lint = subprocess.run(
        [_tool("promtool"), "check", "metrics"],
        input=exposition,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr

    # A real Prometheus scrapes the series: first at 0 (as the exporter's counters start), then counted.
    _Exposition.text = mapper.exposition(statsd_lines, zero=True)
    server = HTTPServer(("127.0.0.1", 0), _Exposition)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    prom_port = harness.free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES)],
                "scrape_configs": [
                    {
                        "job_name": "statsd-exporter",
                        "static_configs": [{"targets": [f"127.0.0.1:{server.server_port}"]}],
                    }
                ],
            }
        )
    )
    log = (tmp_path / "prometheus.log").open("wb")
    prometheus = subprocess.Popen(
        [
            _tool("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        harness.wait_for(
            lambda: _query(prom_port, "count(airflow_ti_failures_by_cause_total)"), timeout=60, what="first scrape"
        )
        _Exposition.text = exposition
        harness.wait_for(
            lambda: _query(prom_port, "sum(airflow_ti_failures_by_cause_total) > 0"), timeout=30, what="counts scraped"
        )

        # The loaded rules are the file's, healthy.
        with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/rules", timeout=10) as resp:
            groups = json.load(resp)["data"]["groups"]
        loaded = [r for g in groups for r in g["rules"]]
        assert len(loaded) == 3 and all(r["health"] == "ok" for r in loaded), loaded

        results = {}
        for title, expr in _dashboard_targets():
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            results[title] = results.get(title, []) + _query(prom_port, expr)
        for alert in loaded:
            inner = alert["query"].rsplit(" > ", 1)[0]
            results[alert["name"]] = _query(prom_port, inner)
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
        server.shutdown()
        log.close()

    assert {"infra", "application", "timeout"} <= _series(results["Task failures by cause"], "failure_cause")
    share = float(results["Share of failures caused by the infrastructure"][0]["value"][1])
    assert 0 < share < 1
    assert ("ops_cap", "infra") in {
        (r["metric"]["dag_id"], r["metric"]["failure_cause"]) for r in results["Failures by Dag and cause"]
    }
    assert {"", "cap_reached", "task_opt_out"} <= _series(
        results["Infrastructure retries granted and denied"], "reason"
    )
    assert _series(results["Tasks that reached their infrastructure-retry cap"], "task_id") == {"lose_always"}
    assert _series(results["Most infrastructure retries granted"], "task_id") == {"lose_worker_once", "lose_always"}
    for alert in ("AirflowInfraFailureSpike", "AirflowInfraRetryCapReached", "AirflowInfraRetryStorm"):
        assert results[alert], f"{alert}'s expression found no series in what the scheduler sent"


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_the_guides_rest_example_reads_each_try(patched_state_sqlite) -> None:
    """docs/operations.md's curl | jq block, run against the patched api-server, for ops_cap.lose_always."""
    tries = [line.split("\t") for line in patched_state_sqlite["rest_tries"].splitlines()]
    assert [(t[0], t[2], t[3]) for t in tries] == [("1", "infra", "1"), ("2", "infra", "1")], tries
    assert [t[1] for t in tries][-1] == "failed"
    assert all("LocalExecutor" in t[4] for t in tries), tries
