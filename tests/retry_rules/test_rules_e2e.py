"""
End to end: the issue's example retry rules decide real failures (real api-server, Dag processor,
scheduler with the LocalExecutor, real task processes, PostgreSQL).

One Dag, one task per example (``dags/retry_rules_dags.py``), with ``[core] max_infra_retries=1``:

* ``RetryRule(cause="timeout", action=FAIL)``: a task that times out with two retries left fails at
  its first try -- decided in the worker, where the task runner's cause is the rule's input;
* ``RetryRule(cause="unknown", action=RETRY, retry_delay=2 min)``: a task process killed by SIGKILL
  (reported by the supervisor; the Execution API evaluates the serialized rule) and a task whose
  supervisor stops heartbeating (the scheduler ends it on the heartbeat timeout and evaluates the rule)
  both go up for retry with the rule's two-minute delay instead of the task's one second;
* ``RetryRule(cause="infra", action=FAIL)``: a task that loses its worker while infrastructure
  retries are on fails at once, its infrastructure retry denied (``retry_rule``);

and each decision is checked where it must show: the database (state, the try's ``retry_reason``,
the delay), the scheduler's one failure line, the ``on_task_instance_failed`` listener, the StatsD
tags and the REST API's tries. A Dag file with an unknown cause is rejected by the Dag processor with
an error naming the task and the rule; Dags vanilla Airflow parses (an exception class defined in a
task factory, a rule that can never match) parse, and the factory's rule decides in the worker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness import Stack, StatsdReceiver, failure_lines
from lines import DEFAULT_LINE, LINE, LIVE_TRIES, PAST_TRIES

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

DAG_ID = "retry_rules_e2e"
ON_3_4 = LINE != DEFAULT_LINE


@pytest.fixture(scope="module")
def receiver() -> Iterator[StatsdReceiver]:
    with StatsdReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def stack(retry_rules_stack, receiver: StatsdReceiver) -> Iterator[Stack]:
    """The module's stack: one infrastructure retry, a 12 s heartbeat timeout, tagged StatsD to ``receiver``."""
    with retry_rules_stack(
        dag_files=["retry_rules_dags.py", "retry_rules_invalid.py", "retry_rules_compat.py"],
        config={
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__CORE__MAX_INFRA_RETRIES": "1",
            "AIRFLOW__CORE__INFRA_RETRY_DELAY": "1",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "12",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(receiver.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
        },
    ) as stack:
        yield stack


def _failure_lines(text: str) -> dict[str, dict[str, str]]:
    """The scheduler's one line per failure (upstream's line with the AIP-97 fields), by task id."""
    return {r["task_id"]: r for r in failure_lines(text)}


def _statsd(receiver: StatsdReceiver, name: str, task_id: str) -> list[dict[str, str]]:
    """The InfluxDB-style tags of every ``airflow.<name>`` line of ``task_id``."""
    return [tags for metric, tags in receiver.tagged() if metric == f"airflow.{name}" and tags.get("task_id") == task_id]


def test_example_rules_decide_their_failures(stack: Stack, receiver: StatsdReceiver) -> None:
    run_id = stack.trigger(DAG_ID)

    # Bad input: the Dag processor rejects the file, naming the task and the rule.
    errors = stack.wait_for(
        lambda: stack.query("SELECT stacktrace FROM import_error WHERE filename LIKE '%%retry_rules_invalid%%'"),
        timeout=120,
        what="the invalid Dag's import error",
    )
    assert "Invalid retry_policy for task 'bad_cause': rules[0]" in errors[0]["stacktrace"]
    assert "unknown cause 'preempted'" in errors[0]["stacktrace"]
    assert not stack.query("SELECT 1 FROM serialized_dag WHERE dag_id = 'retry_rules_invalid'")

    expected = {
        "timeout_fails": "failed",
        "unknown_waits": "up_for_retry",
        "heartbeat_waits": "up_for_retry",
        "infra_fails": "failed",
    }

    def decided():
        rows = stack.query(
            "SELECT task_id, state, try_number, max_tries, failure_cause, retry_reason, "
            f"retry_delay_override, infra_retry_count FROM {LIVE_TRIES} WHERE dag_id = %(d)s",
            d=DAG_ID,
        )
        by_task = {r["task_id"]: r for r in rows}
        if all(by_task.get(t, {}).get("state") == s for t, s in expected.items()):
            return by_task
        return None

    try:
        tis = stack.wait_for(decided, timeout=240, interval=1, what="the four failures decided")
    except TimeoutError:
        print(stack.query(f"SELECT task_id, state, try_number FROM {LIVE_TRIES} WHERE dag_id = %(d)s", d=DAG_ID))
        raise
    scheduler_log = stack.wait_for(
        lambda: (text := stack.log_text("scheduler"))
        and {"heartbeat_waits", "infra_fails"} <= _failure_lines(text).keys()
        and text,
        timeout=60,
        what="the scheduler's failure lines",
    )

    past = {
        r["task_id"]: r
        for r in stack.query(
            f"SELECT task_id, try_number, state, failure_cause, retry_reason, retry_delay_override "
            f"FROM {PAST_TRIES} WHERE dag_id = %(d)s",
            d=DAG_ID,
        )
    }
    lines = _failure_lines(scheduler_log)
    listener = {(r["task_id"], r["pid"]): r for r in stack.jsonl("listener.jsonl") if r["dag_id"] == DAG_ID}
    heard = {task_id: r["retry_rule"] for (task_id, _), r in listener.items()}

    # 1. RetryRule(cause="timeout", action=FAIL): failed at try 1 with two retries left, in the worker.
    timeout = tis["timeout_fails"]
    assert (timeout["try_number"], timeout["failure_cause"]) == (1, "timeout")
    assert heard["timeout_fails"] == "rules[0]"
    worker_counts = _statsd(receiver, "ti_failures", "timeout_fails")
    assert [(t["failure_cause"], t["retry_rule"], t["retry_rule_action"]) for t in worker_counts] == [
        ("timeout", "rules.0", "fail")
    ]
    assert {t["retry_rule"] for t in _statsd(receiver, "ti.failure_cause", "timeout_fails")} == {"worker"}

    # 2. RetryRule(cause="unknown", RETRY, 2 min) on a killed task process: the Execution API decides.
    unknown = tis["unknown_waits"]
    assert unknown["retry_delay_override"] == 120.0
    assert past["unknown_waits"]["failure_cause"] == "unknown"
    assert past["unknown_waits"]["retry_reason"] == "rules[1] (cause=unknown) -> retry"
    assert [(t["retry_rule"], t["retry_rule_action"]) for t in _statsd(receiver, "ti.failure_cause", "unknown_waits")] == [
        ("rules.1", "retry")
    ]

    # 3. The same rule on a heartbeat timeout: the scheduler decides, and its one line names the rule.
    heartbeat = tis["heartbeat_waits"]
    assert heartbeat["retry_delay_override"] == 120.0
    assert past["heartbeat_waits"]["retry_reason"] == "rules[1] (cause=unknown) -> retry"
    line = lines["heartbeat_waits"]
    assert line["failure_reason"].startswith("Heartbeat timeout"), line
    assert (line["failure_cause"], line["retry"], line["retry_rule"]) == (
        "unknown",
        "up_for_retry",
        "rules[1]:retry",
    )
    assert heard["heartbeat_waits"] == "rules[1]"
    assert [t["retry_rule"] for t in _statsd(receiver, "ti.failure_cause", "heartbeat_waits")] == ["rules.1"]

    # 4. RetryRule(cause="infra", action=FAIL): no infrastructure retry, although one was available.
    infra = tis["infra_fails"]
    assert (infra["try_number"], infra["failure_cause"], infra["infra_retry_count"], infra["max_tries"]) == (
        1,
        "infra",
        0,
        2,
    )
    assert infra["retry_reason"] == "rules[0] (cause=infra) -> fail: not safe to run again"
    line = lines["infra_fails"]
    assert (line["failure_cause"], line["retry"], line["infra_retry"], line["retry_rule"]) == (
        "infra",
        "failed",
        "denied:retry_rule",
        "rules[0]:fail",
    )
    assert heard["infra_fails"] == "rules[0]"
    assert [t["reason"] for t in _statsd(receiver, "ti.infra_retry.denied", "infra_fails")] == ["retry_rule"]

    # The try's details in the REST API carry the decision (3.4: upstream's state_reason).
    infra_ti, unknown_tries = (
        stack.rest("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{path}").raise_for_status().json()
        for path in ("infra_fails", "unknown_waits/tries")
    )
    assert infra_ti["state_reason"] == "rules[0] (cause=infra) -> fail: not safe to run again"
    first_try = next(t for t in unknown_tries["task_instances"] if t["try_number"] == 1)
    assert first_try["state_reason"] == "rules[1] (cause=unknown) -> retry"
    if ON_3_4:
        # 3.4's worker sends the policy's reason with a FAILED state too.
        assert timeout["retry_reason"] == "Matched rule for cause timeout"


def test_dags_vanilla_parses_parse_and_keep_their_worker_rules(stack: Stack) -> None:
    """An exception class defined in a task factory is no import error, and its rule still decides in the worker."""
    run_id = stack.trigger("retry_rules_compat")
    assert not stack.query("SELECT 1 FROM import_error WHERE filename LIKE '%%retry_rules_compat%%'")

    def failed():
        rows = stack.query(
            f"SELECT state, try_number, max_tries, failure_cause FROM {LIVE_TRIES} "
            "WHERE dag_id = 'retry_rules_compat' AND task_id = 'uses_quota' AND run_id = %(r)s",
            r=run_id,
        )
        return rows if rows and rows[0]["state"] == "failed" else None

    (ti,) = stack.wait_for(failed, timeout=180, interval=1, what="uses_quota failed")
    # Failed at its first try with two retries left: the rule on the factory's class matched in the worker.
    assert (ti["try_number"], ti["max_tries"], ti["failure_cause"]) == (1, 2, "application")
