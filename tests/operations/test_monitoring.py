"""
The monitoring assets in ``monitoring/`` checked with real tools (docs/operations.md, "Metrics").

- ``promtool check rules`` and ``promtool test rules`` (Debian's ``prometheus`` package, installed by
  ``.ci/services.sh``): each alert fires on a synthetic series and stays quiet without one; a copy of
  the rules with the thresholds raised makes the unit tests fail, so they test the thresholds.
  Copies of the rules with each count reduced to ``increase()``, or without the ``up offset`` guard,
  fail the unit tests where a series appears with its first increment already counted (as a real
  statsd_exporter serves it), or where Prometheus starts after the counters.
- Each alert's ``runbook_url`` is a section of docs/operations.md.
- The Helm values example carries exactly ``monitoring/statsd-mappings.yml``, and every option the
  patches add to ``config.yml`` at its default; every metric the patches add to the metrics registry
  is mapped under each of its names.
- Both metric names (``[metrics] legacy_names_on`` True and False), and plain StatsD: Airflow's own
  metrics code sends one count of each metric, the mappings turn the lines into series, and a real
  Prometheus evaluates every panel and alert on them: the same series either way.
- End to end: a real patched scheduler (LocalExecutor, ``dags/ops_state.py``) sends its StatsD lines
  to a receiver; the mappings turn them into Prometheus series (``statsd_mapping.py``, a stand-in
  for the statsd_exporter, which cannot be installed here); a real Prometheus scrapes them, and every
  Grafana panel's expression and every alert's expression (without its threshold) is evaluated over
  the Prometheus HTTP API and must return the series the panel is about.
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import subprocess
import sys
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
METRICS_REGISTRY = "shared/observability/src/airflow_shared/observability/metrics/metrics_template.yaml"
CONFIG_YML = "airflow-core/src/airflow/config_templates/config.yml"
ALERTS = (
    "AirflowInfraFailureSpike",
    "AirflowInfraRetryCapReached",
    "AirflowInfraRetryStorm",
    "AirflowInfraRetryGuardEngaged",
    "AirflowOOMKillSurge",
)

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
    assert f"SUCCESS: {len(ALERTS)} rules found" in proc.stdout


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
    raised, count = re.subn(
        r"\) (>=?) (\d+)$", lambda m: f") {m.group(1)} {int(m.group(2)) * 1000 + 1}", rules, flags=re.M
    )
    assert count == len(ALERTS)
    (tmp_path / RULES.name).write_text(raised)
    shutil.copy(RULE_TESTS, tmp_path)
    proc = _promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert proc.returncode != 0
    for alert in ALERTS:
        assert f"alertname: {alert}" in proc.stdout + proc.stderr


def _first_sample_blind(rules: str) -> str:
    """The rules with each count reduced to ``increase()`` alone, as they were before issue 38."""
    blind, count = re.subn(
        r"\(increase\((?P<x>\w+(?:\{[^}]*\})?)\[(?P<w>\w+)\]\) and (?P=x) offset (?P=w)\)\s*"
        r"or \((?P=x) and on \(job, instance\) up offset (?P=w)\)\s*or increase\((?P=x)\[(?P=w)\]\)",
        r"increase(\g<x>[\g<w>])",
        rules,
    )
    assert count == 7, count
    return blind


def test_rule_unit_tests_count_a_series_first_sample(tmp_path: Path) -> None:
    """
    A real statsd_exporter creates a series at its first line: the first sample Prometheus scrapes
    already holds the first increment. With ``increase()`` alone, each alert misses exactly the
    unit tests whose series appear that way (and only those).
    """
    (tmp_path / RULES.name).write_text(_first_sample_blind(RULES.read_text()))
    shutil.copy(RULE_TESTS, tmp_path)
    proc = _promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert proc.returncode != 0
    failed = set(re.findall(r"alertname: (\w+), time: (\w+),", proc.stdout + proc.stderr))
    assert failed == {
        ("AirflowInfraFailureSpike", "27m"),
        ("AirflowInfraRetryCapReached", "27m"),
        ("AirflowInfraRetryStorm", "21m"),
        ("AirflowInfraRetryGuardEngaged", "21m"),
        ("AirflowOOMKillSurge", "27m"),
    }, proc.stdout


def test_rule_unit_tests_do_not_count_old_series_as_new(tmp_path: Path) -> None:
    """Without the ``up offset`` guard, a Prometheus that starts late takes days-old counters for new failures."""
    unguarded = re.sub(r" and on \(job, instance\) up offset \w+\)", ")", RULES.read_text())
    (tmp_path / RULES.name).write_text(unguarded)
    shutil.copy(RULE_TESTS, tmp_path)
    proc = _promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert proc.returncode != 0
    failed = set(re.findall(r"alertname: (\w+), time: (\w+),", proc.stdout + proc.stderr))
    assert ("AirflowInfraFailureSpike", "8m") in failed and ("AirflowInfraRetryCapReached", "8m") in failed


def test_alerts_have_a_runbook_in_the_guide() -> None:
    """Each alert's ``runbook_url`` is a section of docs/operations.md (GitHub's heading anchors)."""
    guide = (REPO / "docs" / "operations.md").read_text()
    anchors = {_github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", guide, re.M)}
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            url = rule["annotations"]["runbook_url"]
            path, _, anchor = url.partition("#")
            assert path == "docs/operations.md" and anchor in anchors, (rule["alert"], url)


def _github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*]", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_helm_values_carry_the_mappings() -> None:
    values = yaml.safe_load(HELM_VALUES.read_text())
    assert values["statsd"]["extraMappings"] == yaml.safe_load(MAPPINGS.read_text())["mappings"]
    assert values["config"]["metrics"]["statsd_influxdb_enabled"] == "True"
    assert values["config"]["core"]["max_infra_retries"] == "0"


def _added(patch_path: str) -> list[tuple[str, list[str]]]:
    """(hunk header, added lines) of each hunk of ``patch_path`` (an upstream file) in every line's series."""
    hunks = []
    for patch in sorted((REPO / "lines").glob("*/patches/*/*.patch")):
        in_file = False
        for line in patch.read_text().splitlines():
            if line.startswith("diff --git "):
                in_file = line.endswith(f" b/{patch_path}")
            elif in_file and line.startswith("@@"):
                hunks.append((line, []))
            elif in_file and hunks and line.startswith("+") and not line.startswith("+++"):
                hunks[-1][1].append(line[1:])
    return hunks


def _registry_metrics() -> dict[str, str]:
    """The metrics the patches add to Airflow's metrics registry: name -> legacy name (``-`` if none)."""
    metrics: dict[str, str] = {}
    for _, added in _added(METRICS_REGISTRY):
        name = None
        for line in added:
            if found := re.match(r'  - name: "(.+)"$', line):
                name = found.group(1)
                metrics[name] = "-"
            elif name and (found := re.match(r'    legacy_name: "(.+)"$', line)):
                metrics[name] = found.group(1)
    return metrics


def _config_options() -> dict[tuple[str, str], str]:
    """The options the patches add to config.yml: (section, option) -> default."""
    options: dict[tuple[str, str], str] = {}
    for header, added in _added(CONFIG_YML):
        section = header.rsplit("@@", 1)[1].strip().rstrip(":")
        option = None
        for line in added:
            if found := re.match(r"    (\w+):$", line):
                option = found.group(1)
            elif option and (found := re.match(r'      default: "(.*)"$', line)):
                options[(section, option)] = found.group(1)
    return options


def test_the_patches_add_what_these_tests_know() -> None:
    """The parsers above read the patches (a control for the two tests below)."""
    assert _registry_metrics() == {
        "ti.failure_cause": "ti.failure_cause.{failure_cause}",
        "ti.infra_retry.granted": "-",
        "ti.infra_retry.denied": "-",
        "ti.infra_retry.held": "-",
        "scheduler.infra_retry_guard.engaged": "-",
        "scheduler.infra_retry_guard.released": "-",
        "asset.emit_chain.stopped": "-",
    }
    assert _config_options()[("core", "max_infra_retries")] == "0"
    assert _config_options()[("scheduler", "infra_retry_storm_threshold")] == "30"


def test_helm_values_set_every_option_the_patches_add() -> None:
    """Each option a patch adds to config.yml is in the Helm values, at its default, with a comment."""
    values = yaml.safe_load(HELM_VALUES.read_text())
    text = HELM_VALUES.read_text().splitlines()
    for (section, option), default in _config_options().items():
        assert values["config"].get(section, {}).get(option) == default, (section, option, default)
        line = next(i for i, t in enumerate(text) if t.strip().startswith(f"{option}:"))
        assert text[line - 1].strip().startswith("#"), f"{option} has no comment in {HELM_VALUES.name}"


def test_every_registry_metric_is_mapped_under_each_of_its_names() -> None:
    """Each metric a patch adds to the registry maps under its new name and its legacy name (with tags)."""
    mapper = Mapper(MAPPINGS)
    for name, legacy in _registry_metrics().items():
        assert mapper.map_line(f"airflow.{name},dag_id=etl:1|c"), name
        if legacy != "-":
            formatted = legacy.format_map(collections.defaultdict(lambda: "infra"))
            assert mapper.map_line(f"airflow.{formatted},dag_id=etl:1|c"), legacy


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


def _evaluate(mapper: Mapper, statsd_lines: list[str], tmp_path: Path) -> dict[str, list[dict[str, Any]]]:
    """
    The results of every dashboard panel's and every alert's expression (without its threshold) in a
    real Prometheus that scrapes what the mappings make of ``statsd_lines``: first at 0 (as the
    exporter's counters start), then counted.
    """
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
    every = '{__name__=~"airflow_.+"}'
    try:
        harness.wait_for(lambda: _query(prom_port, f"count({every})"), timeout=60, what="first scrape")
        _Exposition.text = exposition
        harness.wait_for(lambda: _query(prom_port, f"sum({every}) > 0"), timeout=30, what="counts scraped")

        # The loaded rules are the file's, healthy.
        with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/rules", timeout=10) as resp:
            groups = json.load(resp)["data"]["groups"]
        loaded = [r for g in groups for r in g["rules"]]
        assert {r["name"] for r in loaded} == set(ALERTS), loaded
        assert all(r["health"] == "ok" for r in loaded), loaded

        results: dict[str, list[dict[str, Any]]] = {}
        for title, expr in _dashboard_targets():
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            results[title] = results.get(title, []) + _query(prom_port, expr)
        for alert in loaded:
            inner = re.split(r" >=? (?=[\d.]+$)", alert["query"])[0]
            assert inner != alert["query"], alert["query"]
            results[alert["name"]] = _query(prom_port, inner)
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
        server.shutdown()
        log.close()
    return results


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
    # One count per failed try under each name (legacy_names_on is True): the legacy name and the new one.
    legacy = sum(v for name, _, v in mapped if name == "airflow_ti_failures_by_cause_total")
    new = sum(v for name, labels, v in mapped if name == "airflow_ti_failure_cause_total")
    assert legacy == new == len([line for line in statsd_lines if re.match(r"airflow\.ti\.failure_cause\.\w+,", line)])

    results = _evaluate(mapper, statsd_lines, tmp_path)

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
    # The Dags lose no queue's worth of tries at once: the storm guard never engages.
    for alert in ("AirflowInfraFailureSpike", "AirflowInfraRetryCapReached", "AirflowInfraRetryStorm"):
        assert results[alert], f"{alert}'s expression found no series in what the scheduler sent"


#: One count of each metric the patches add to the registry, with the tags their code sends
#: (``ti.stats_tags`` is dag_id and task_id on 3.3; 3.4 adds run_type).
EVENTS: list[tuple[str, dict[str, str], int]] = [
    (
        "ti.failure_cause",
        {
            "dag_id": "etl",
            "task_id": "load",
            "failure_cause": "infra",
            "retry_rule": "none",
            "retry_rule_action": "none",
        },
        3,
    ),
    (
        "ti.failure_cause",
        {
            "dag_id": "etl",
            "task_id": "load",
            "failure_cause": "application",
            "retry_rule": "rules.0",
            "retry_rule_action": "fail",
        },
        2,
    ),
    (
        "ti.failure_cause",
        {
            "dag_id": "etl",
            "task_id": "transform",
            "failure_cause": "oom",
            "retry_rule": "none",
            "retry_rule_action": "none",
        },
        1,
    ),
    ("ti.infra_retry.granted", {"dag_id": "etl", "task_id": "load", "reason": "granted"}, 2),
    ("ti.infra_retry.denied", {"dag_id": "etl", "task_id": "load", "reason": "cap_reached"}, 1),
    ("ti.infra_retry.denied", {"dag_id": "etl", "task_id": "extract", "reason": "retry_rule"}, 1),
    ("ti.infra_retry.held", {"dag_id": "etl", "task_id": "load", "queue": "default"}, 2),
    ("scheduler.infra_retry_guard.engaged", {"executor": "CeleryExecutor", "queue": "default"}, 1),
    ("scheduler.infra_retry_guard.released", {"executor": "CeleryExecutor", "queue": "default"}, 1),
    ("asset.emit_chain.stopped", {"dag_id": "investigate"}, 1),
]

#: Sends EVENTS through Airflow's own metrics code (the installed patched build): stats.incr, the
#: registry's legacy names, the StatsD logger's InfluxDB tags, the statsd client. Prints each line.
_SEND = """
import json, sys
from statsd import StatsClient
from airflow._shared.observability.metrics import stats
try:
    from airflow._shared.observability.metrics.statsd_logger import get_statsd_logger
except ImportError:  # 3.4 names the UDP logger's factory for its transport
    from airflow._shared.observability.metrics.statsd_logger import get_udp_statsd_logger as get_statsd_logger

class Printed(StatsClient):
    def _send(self, data):
        print("statsd:", data)

legacy, tags, events = sys.argv[1] == "True", sys.argv[2] == "True", json.loads(sys.argv[3])
stats.initialize(
    factory=lambda: get_statsd_logger(
        stats_class=Printed, host="127.0.0.1", port=8125, prefix="airflow",
        influxdb_tags_enabled=tags, statsd_influxdb_enabled=tags, statsd_disabled_tags="job_id,run_id",
    ),
    export_legacy_names=legacy,
)
for name, event_tags, count in events:
    stats.incr(name, count, tags=event_tags)
"""


def _airflow_lines(*, legacy_names_on: bool, tags: bool) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", _SEND, str(legacy_names_on), str(tags), json.dumps(EVENTS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [line.removeprefix("statsd: ") for line in proc.stdout.splitlines() if line.startswith("statsd: ")]


def _mapped(lines: list[str]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    mapper = Mapper(MAPPINGS)
    series: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in lines:
        found = mapper.map_line(line)
        assert found, f"not mapped: {line}"
        name, labels, value = found
        key = (name, tuple(sorted(labels.items())))
        series[key] = series.get(key, 0) + value
    return series


def test_both_metric_names_map_to_the_series_the_dashboard_reads() -> None:
    """
    Airflow's own metrics code sends each event with ``[metrics] legacy_names_on`` True and False;
    every line maps, and the series are the ones statsd-mappings.yml says.
    """
    assert {name for name, _, _ in EVENTS} == set(_registry_metrics())
    legacy_on = _mapped(_airflow_lines(legacy_names_on=True, tags=True))
    legacy_off = _mapped(_airflow_lines(legacy_names_on=False, tags=True))

    infra = (
        ("dag_id", "etl"),
        ("failure_cause", "infra"),
        ("retry_rule", "none"),
        ("retry_rule_action", "none"),
        ("task_id", "load"),
    )
    # The new name, with the cause from its tag, either way; the legacy one only with legacy_names_on.
    assert legacy_on[("airflow_ti_failure_cause_total", infra)] == 3
    assert legacy_on[("airflow_ti_failures_by_cause_total", infra)] == 3
    assert legacy_off[("airflow_ti_failure_cause_total", infra)] == 3
    assert not any(name == "airflow_ti_failures_by_cause_total" for name, _ in legacy_off)
    # The other metrics have one name: the same series either way, with their tags as labels.
    others = {k: v for k, v in legacy_on.items() if "failure" not in k[0]}
    assert others == {k: v for k, v in legacy_off.items() if "failure" not in k[0]}
    denied_by_rule = (("dag_id", "etl"), ("reason", "retry_rule"), ("task_id", "extract"))
    assert others[("airflow_ti_infra_retry_denied_total", denied_by_rule)] == 1
    held = (("dag_id", "etl"), ("queue", "default"), ("task_id", "load"))
    assert others[("airflow_ti_infra_retry_held_total", held)] == 2
    guard = (("executor", "CeleryExecutor"), ("queue", "default"))
    assert others[("airflow_scheduler_infra_retry_guard_engaged_total", guard)] == 1
    assert others[("airflow_scheduler_infra_retry_guard_released_total", guard)] == 1
    assert others[("airflow_asset_emit_chain_stopped_total", (("dag_id", "investigate"),))] == 1

    # Plain StatsD: no labels, but the legacy name still carries the cause.
    plain = _mapped(_airflow_lines(legacy_names_on=True, tags=False))
    assert plain[("airflow_ti_failures_by_cause_total", (("failure_cause", "infra"),))] == 3
    assert plain[("airflow_ti_failures_by_cause_total", (("failure_cause", "oom"),))] == 1
    assert plain[("airflow_ti_failure_cause_total", ())] == 6


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_panels_and_alerts_read_either_metric_name(tmp_path: Path) -> None:
    """
    Every dashboard panel and every alert finds the same series whether Airflow sends the legacy
    names or not (and the failure panels by cause, with plain StatsD): a real Prometheus each.
    """
    found = {}
    for legacy_names_on, tags in ((True, True), (False, True), (True, False)):
        lines = _airflow_lines(legacy_names_on=legacy_names_on, tags=tags)
        (tmp_path / f"{legacy_names_on}-{tags}").mkdir()
        results = _evaluate(Mapper(MAPPINGS), lines, tmp_path / f"{legacy_names_on}-{tags}")
        found[(legacy_names_on, tags)] = {
            title: sorted(
                tuple(sorted((k, v) for k, v in r["metric"].items() if k not in ("job", "instance"))) for r in result
            )
            for title, result in results.items()
        }
        for title, result in results.items():
            assert all(float(r["value"][1]) > 0 for r in result), (legacy_names_on, tags, title, result)
    tagged, new_only, plain = found[(True, True)], found[(False, True)], found[(True, False)]
    assert tagged == new_only
    for title, series in tagged.items():
        assert series, f"{title} found nothing"
    causes = [(("failure_cause", "application"),), (("failure_cause", "infra"),), (("failure_cause", "oom"),)]
    assert tagged["Task failures by cause"] == plain["Task failures by cause"] == causes
    assert plain["AirflowInfraFailureSpike"] == plain["AirflowOOMKillSurge"] == [()]
    assert tagged["Tries OOM-killed (cause oom), by Dag"] == [(("dag_id", "etl"),)]


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_the_guides_rest_example_reads_each_try(patched_state_sqlite) -> None:
    """docs/operations.md's curl | jq block, run against the patched api-server, for ops_cap.lose_always."""
    tries = [line.split("\t") for line in patched_state_sqlite["rest_tries"].splitlines()]
    assert [(t[0], t[2], t[3]) for t in tries] == [("1", "infra", "1"), ("2", "infra", "1")], tries
    assert [t[1] for t in tries][-1] == "failed"
    assert all("LocalExecutor" in t[4] for t in tries), tries
