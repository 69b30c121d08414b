"""The Dag vanilla Airflow runs after the rollback: a new run of it must succeed on the old database."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task

with DAG("ops_after_rollback", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):

    @task(retries=0)
    def hello():
        return "hello from vanilla Airflow"

    hello()
