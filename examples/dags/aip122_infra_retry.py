#
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
AIP-122 Infrastructure Retries: a task that loses its worker on the first try and finishes on the second.

Run it with ``AIRFLOW__CORE__MAX_INFRA_RETRIES=1`` and ``AIRFLOW__CORE__INFRA_RETRY_DELAY=2`` and the
LocalExecutor (``make demo`` does). On its first try the task kills its own worker -- the parent of
the task process is its supervisor, which with the LocalExecutor is the worker process -- and then
itself, the way a node that goes away takes both down. The executor reports the failure with the
cause ``infra``; the task has ``retries=0`` but gets an infrastructure retry, which starts about
two seconds later and succeeds. The task instance ends ``success`` with ``try_number=2`` and
``infra_retry_count=1``.

``not_safe_to_rerun`` shows the opt-out: ``max_infra_retries=0`` keeps a task that must not run
twice from being retried after an infrastructure failure; it fails as it always did.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime

from airflow.sdk import DAG, task


def _lose_worker() -> None:
    """Take down the worker (the supervisor of this task process) and this process, like a lost node."""
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


with DAG(
    "aip122_infra_retry",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["aip-122", "example"],
    doc_md=__doc__,
):

    @task(retries=0)
    def lose_worker_once(ti=None):
        print(f"try {ti.try_number}")
        if ti.try_number == 1:
            time.sleep(1)
            _lose_worker()
        return f"finished on try {ti.try_number}"

    @task(retries=0, max_infra_retries=0)
    def not_safe_to_rerun(ti=None):
        if ti.try_number == 1:
            _lose_worker()
        return "never reached: this task is not retried"

    lose_worker_once()
    not_safe_to_rerun()
