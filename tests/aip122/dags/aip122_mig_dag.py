"""Dag run by ``airflow dags test`` to fill task_instance and its past tries before migrating."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task

with DAG("aip122_mig", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task
    def ok():
        return 1

    @task(retries=1, retry_delay=timedelta(seconds=0))
    def flaky(ti=None):
        if ti.try_number == 1:
            raise RuntimeError("first try fails")
        return 2

    ok() >> flaky()
