"""40 tasks whose every try is lost as infra while their Dag's storm is on (tests/retry_rules/test_storm_e2e.py)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task

N_TASKS = 40

for dag_id in ("storm_unguarded", "storm_guarded", "storm_guarded_two_schedulers"):
    with DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False, max_active_tasks=N_TASKS):
        for i in range(N_TASKS):

            # The backoff's cap is the task's own (2 s); [core] max_infra_retry_delay, which also
            # bounds the guard's hold, is above the storm's length (test_storm_e2e.py).
            @task(task_id=f"t{i:02d}", retries=0, max_infra_retry_delay=2)
            def work():
                return None

            work()
