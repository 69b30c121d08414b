"""
``ti.infra_retry.granted`` / ``ti.infra_retry.denied`` on a real StatsD receiver (UDP on loopback).

A real scheduler loop (a spawned process with StatsD configured through the environment, as in a
deployment) consumes two ``infra`` executor events: one for a task whose retry is granted and one
for a task that opted out (``max_infra_retries=0``, denied with ``reason=task_opt_out``). The
receiver must get each counter exactly once, with the plain StatsD name and, with
``statsd_influxdb_enabled``, with the ``dag_id``, ``task_id`` and ``reason`` tags (3.4: and the Dag
run's ``run_type``).
"""

from __future__ import annotations

import multiprocessing
import time

import pytest

# Import (and so configure) Airflow before any fixture touches logging; conftest set its environment.
import airflow  # noqa: F401

import scheduler_harness
from harness import StatsdReceiver, wait_for
from lines import DEFAULT_LINE, LINE
from test_atomic_grants import _job, _new_try, _session

pytestmark = [pytest.mark.usefixtures("db_env"), pytest.mark.postgres]

SPAWN = multiprocessing.get_context("spawn")


#: How long after the counters arrived the receiver keeps listening for a duplicate.
GRACE = 2.0


def _run_loop(monkeypatch, receiver: StatsdReceiver, *, influx: bool) -> list[str]:
    monkeypatch.setenv("AIRFLOW__CORE__MAX_INFRA_RETRIES", "2")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(receiver.port))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED", str(influx))
    with _session() as session:
        job_id = _job(session)
        granted_ti, _ = _new_try(session, "r0", state="running", job_id=job_id)
        denied_ti, _ = _new_try(session, "opt_out", state="running", job_id=job_id)
    out = SPAWN.Queue()
    proc = SPAWN.Process(
        target=scheduler_harness.executor_events_for_metrics, args=(job_id, [granted_ti, denied_ti], out)
    )
    proc.start()
    try:
        assert out.get(timeout=180) == 0  # both events consumed
    finally:
        proc.join(timeout=60)
    assert proc.exitcode == 0
    wait_for(
        lambda: len(receiver.matching("airflow.ti.infra_retry.")) >= 2,
        timeout=10,
        interval=0.05,
        what="the two infra_retry counters",
    )
    # "Exactly once": keep listening for a grace period, so that a duplicate would be counted too.
    time.sleep(GRACE)
    return receiver.matching("airflow.ti.infra_retry.")


@pytest.mark.timeout(300)
def test_plain_statsd_name(monkeypatch):
    with StatsdReceiver() as receiver:
        lines = _run_loop(monkeypatch, receiver, influx=False)
    # Plain StatsD has no tags: the name alone, once per decision.
    assert sorted(lines) == ["airflow.ti.infra_retry.denied:1|c", "airflow.ti.infra_retry.granted:1|c"]


@pytest.mark.timeout(300)
def test_statsd_with_influxdb_tags(monkeypatch):
    with StatsdReceiver() as receiver:
        lines = _run_loop(monkeypatch, receiver, influx=True)
    # 3.4's task instance stats tags are its Dag run's (dag_id, run_type) plus task_id; 3.3's have
    # no run_type.
    run_type = "" if LINE == DEFAULT_LINE else ",run_type=manual"
    assert sorted(lines) == [
        f"airflow.ti.infra_retry.denied,dag_id=aip122_db{run_type},task_id=opt_out,reason=task_opt_out:1|c",
        f"airflow.ti.infra_retry.granted,dag_id=aip122_db{run_type},task_id=r0,reason=granted:1|c",
    ]
