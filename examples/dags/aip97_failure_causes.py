# Licensed to the Apache Software Foundation (ASF) under one
# or more contributor license agreements.  See the NOTICE file
# distributed with this work for additional information
# regarding copyright ownership.  The ASF licenses this file
# to you under the Apache License, Version 2.0 (the
# "License"); you may not use this file except in compliance
# with the License.  You may obtain a copy of the License at
#
#   http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an
# "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
# KIND, either express or implied.  See the License for the
# specific language governing permissions and limitations
# under the License.
"""
AIP-97 Task Failure Classification demo: three tasks, three failure causes.

Run it with the LocalExecutor (``airflow dags trigger aip97_failure_causes``) and look at the
``failure_cause`` / ``failure_reason`` of each task instance (REST API v2 task instances and task
instance tries, or the ``task_instance`` / ``task_instance_history`` tables):

``raises``
    Raises ``ValueError`` from task code. Expected: ``failed``, cause ``application``, reason
    ``ValueError: the input file has no header row``. Classified by the task runner.

``times_out``
    Sleeps past its ``execution_timeout`` of 3 seconds. Expected: ``failed``, cause ``timeout``,
    reason starting ``AirflowTaskTimeout``. Classified by the task runner.

``worker_lost``
    On its first try it SIGKILLs its own supervisor -- with the LocalExecutor, the worker process
    running it -- standing in for a lost node or an evicted pod. Expected for try 1: cause ``infra``
    with the reason "LocalExecutor worker process <pid> died (killed by SIGKILL) while running the
    task; ...", reported by the LocalExecutor within seconds (not after the 300 s heartbeat timeout);
    the try goes ``up_for_retry`` and is archived with its cause in the task instance history. Try 2
    runs after 5 seconds and succeeds, which clears the live row's cause.

Every failure callback below also logs ``context["failure_cause"]``.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

log = logging.getLogger(__name__)


def log_failure_cause(context):
    """Failure/retry callback: show the cause the callback context carries."""
    log.warning(
        "Task %s try %s failed with cause %s",
        context["ti"].task_id,
        context["ti"].try_number,
        context.get("failure_cause"),
    )


with DAG(
    dag_id="aip97_failure_causes",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["example", "aip-97"],
    default_args={"on_failure_callback": log_failure_cause, "on_retry_callback": log_failure_cause},
):

    @task(retries=0)
    def raises():
        raise ValueError("the input file has no header row")

    @task(retries=0, execution_timeout=timedelta(seconds=3))
    def times_out():
        time.sleep(60)

    @task(retries=1, retry_delay=timedelta(seconds=5))
    def worker_lost(ti=None):
        if ti.try_number == 1:
            # Our parent is the supervisor (with the LocalExecutor: the worker process).
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(5)
        return "second try succeeded"

    raises()
    times_out()
    worker_lost()
