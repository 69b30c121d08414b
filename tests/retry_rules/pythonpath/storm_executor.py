"""
A LocalExecutor that loses every try of a Dag while that Dag's storm is on (tests/retry_rules).

``$RR_OUT/storm-<dag_id>`` present = the storm is on: a try queued to this executor is not run; the
executor reports it failed with the cause ``infra`` at once, as the Kubernetes executor does for a pod
whose node went away (``DisruptionTarget``). Every try the executor receives is appended to
``$RR_OUT/tries.jsonl`` with the time it arrived, so the test can count the tries started per minute.
Once the file is gone the tries run as with the LocalExecutor. Real scheduler, real database; only
the fleet is simulated, without starting a process for a lost try.
"""

from __future__ import annotations

import json
import os
import time

from airflow.executors.local_executor import LocalExecutor


class StormExecutor(LocalExecutor):
    def _process_workloads(self, workload_list):
        out = os.environ["RR_OUT"]
        kept = []
        with open(os.path.join(out, "tries.jsonl"), "a") as tries:
            for workload in workload_list:
                ti = getattr(workload, "ti", None)
                if ti is None:
                    kept.append(workload)
                    continue
                lost = os.path.exists(os.path.join(out, f"storm-{ti.dag_id}"))
                record = {
                    "t": time.time(),
                    "dag_id": ti.dag_id,
                    "task_id": ti.task_id,
                    "try_number": ti.try_number,
                    "queue": ti.queue,
                    "lost": lost,
                }
                tries.write(json.dumps(record) + "\n")
                if not lost:
                    kept.append(workload)
                    continue
                key = self.get_workload_key(workload) if hasattr(self, "get_workload_key") else ti.key
                self._forget_queued(key)
                self.fail(
                    key,
                    failure_cause="infra",
                    failure_reason="Storm: the node pool of this queue went away (simulated)",
                )
        if kept:
            super()._process_workloads(kept)

    def _forget_queued(self, key) -> None:
        queues = getattr(self, "executor_queues", None)
        if queues is not None:  # 3.4: per-workload-type queues
            for queue in queues.values():
                queue.pop(key, None)
        else:
            self.queued_tasks.pop(key, None)
