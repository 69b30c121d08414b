"""
The AIP-97 failure metrics on every metrics backend: plain StatsD, StatsD with InfluxDB tags, OTel.

A subprocess initialises Airflow's metrics exactly as the scheduler does and calls
``emit_failure_metrics`` once per cause; a loopback UDP receiver (StatsD) or the OTel console
exporter shows what went out.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import harness
import pytest
from harness import StatsdReceiver

FIXTURES = Path(__file__).resolve().parent / "fixtures"

CAUSES = ("infra", "timeout", "application", "unknown", "oom")
SCRIPT = str(FIXTURES / "emit_failure_metrics.py")


def _run(tmp_path, extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    env = harness.AirflowEnv(sys.prefix, tmp_path / "home", extra_env=extra_env)
    proc = subprocess.run(
        [env.python, SCRIPT],
        env=env.env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=env.home,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _wait_lines(receiver: StatsdReceiver, n: int) -> list[str]:
    harness.wait_for(
        lambda: len(receiver.lines) >= n,
        timeout=5,
        interval=0.05,
        what="statsd packets",
    )
    return list(receiver.lines)


@pytest.mark.timeout(90)
def test_plain_statsd_uses_the_legacy_name_per_cause(tmp_path):
    with StatsdReceiver() as receiver:
        _run(
            tmp_path,
            {
                "AIRFLOW__METRICS__STATSD_ON": "True",
                "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__STATSD_PORT": str(receiver.port),
                "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            },
        )
        lines = _wait_lines(receiver, len(CAUSES) * 5)
    for cause in CAUSES:
        assert f"airflow.ti.failure_cause.{cause}:1|c" in lines
    # Plain StatsD has no tags: the modern names count all causes together.
    assert lines.count("airflow.ti.failure_cause:1|c") == len(CAUSES)
    assert lines.count("airflow.ti_failures:1|c") == len(CAUSES)
    assert lines.count("airflow.operator_failures_PythonOperator:1|c") == len(CAUSES)


@pytest.mark.timeout(90)
def test_statsd_with_influxdb_tags(tmp_path):
    with StatsdReceiver() as receiver:
        _run(
            tmp_path,
            {
                "AIRFLOW__METRICS__STATSD_ON": "True",
                "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__STATSD_PORT": str(receiver.port),
                "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
                "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
            },
        )
        _wait_lines(receiver, len(CAUSES) * 5)
    # Later features of the series add tags of their own (retry-rules: retry_rule, retry_rule_action):
    # AIP-97's tags must be there, whatever else is.
    stats = receiver.tagged()
    base = {"dag_id": "aip97_dag", "task_id": "aip97_task"}
    for cause in CAUSES:
        legacy = [tags for name, tags in stats if name == f"airflow.ti.failure_cause.{cause}"]
        assert len(legacy) == 1 and base.items() <= legacy[0].items() and "failure_cause" not in legacy[0], legacy
        for name in ("airflow.ti.failure_cause", "airflow.ti_failures", "airflow.operator_failures"):
            tagged = [tags for n, tags in stats if n == name and tags.get("failure_cause") == cause]
            assert len(tagged) == 1 and base.items() <= tagged[0].items(), (name, cause, tagged)


class _OtlpSink(BaseHTTPRequestHandler):
    """Accepts OTLP/HTTP exports (and counts them) so the exporter does not retry."""

    posts: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        _OtlpSink.posts.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.timeout(90)
def test_opentelemetry(tmp_path):
    server = HTTPServer(("127.0.0.1", 0), _OtlpSink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proc = _run(
            tmp_path,
            {
                "AIRFLOW__METRICS__OTEL_ON": "True",
                "AIRFLOW__METRICS__OTEL_DEBUGGING_ON": "True",  # console exporter too, read below
                "AIRFLOW__METRICS__OTEL_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__OTEL_PORT": str(server.server_port),
            },
        )
    finally:
        server.shutdown()
    assert "/v1/metrics" in _OtlpSink.posts
    assert "BACKEND SafeOtelLogger" in proc.stdout
    decoder = json.JSONDecoder()
    text, points = proc.stdout, {}
    pos = text.find("{")
    while pos != -1:
        doc, end = decoder.raw_decode(text, pos)
        for rm in doc["resource_metrics"]:
            for sm in rm["scope_metrics"]:
                for metric in sm["metrics"]:
                    for dp in metric["data"]["data_points"]:
                        points.setdefault(metric["name"], []).append(dp["attributes"])
        pos = text.find("{", end)
    for cause in CAUSES:
        assert f"airflow.ti.failure_cause.{cause}" in points
    # The console exporter prints cumulative points at every interval: compare the sets.
    assert {a["failure_cause"] for a in points["airflow.ti.failure_cause"]} == set(
        CAUSES
    )
    assert {a["failure_cause"] for a in points["airflow.ti_failures"]} == set(CAUSES)
    assert all(a["dag_id"] == "aip97_dag" for a in points["airflow.ti.failure_cause"])
