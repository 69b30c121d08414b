"""Dags both builds parse (no patch-set argument): a success, and a failure that is retried once."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task

with DAG("mixed_ok", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=0)
    def ok():
        return "ok"

    ok()


with DAG("mixed_fail", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=1, retry_delay=timedelta(seconds=0))
    def fails():
        raise RuntimeError("the task's own bug")

    fails()
