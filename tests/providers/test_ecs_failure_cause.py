"""
AIP-97 failure causes reported by the ECS executor.

The executor runs with a real botocore ECS client (built by the provider's ``EcsHook``) whose
RunTask and DescribeTasks responses are stubbed at the botocore level with ``Stubber``; the
responses (``fixtures/ecs/*.json``) are shaped like ``aws ecs describe-tasks`` output, with
timestamps turned into the ``datetime`` objects botocore returns.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest
from _helpers import core_supports_failure_cause, event_failure

INFRA, UNKNOWN = "infra", "unknown"


def _core_knows_oom() -> bool:
    try:
        from airflow._shared.state.failure import TaskFailureCause
    except ImportError:
        return False
    return "oom" in {c.value for c in TaskFailureCause}


#: The oom feature's cause for a container stopped with OutOfMemoryError; ``unknown`` on a core before it.
OOM = "oom" if _core_knows_oom() else UNKNOWN
ECS_FIXTURES = Path(__file__).parent / "fixtures" / "ecs"

os.environ.update(
    {
        "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(
            {"conn_type": "aws", "login": "AKIAIOSFODNN7EXAMPLE", "password": "not-a-real-secret"}
        ),
        "AIRFLOW__AWS_ECS_EXECUTOR__REGION_NAME": "eu-west-1",
        "AIRFLOW__AWS_ECS_EXECUTOR__CLUSTER": "airflow",
        "AIRFLOW__AWS_ECS_EXECUTOR__CONTAINER_NAME": "airflow-worker",
        "AIRFLOW__AWS_ECS_EXECUTOR__TASK_DEFINITION": "airflow-worker:7",
        "AIRFLOW__AWS_ECS_EXECUTOR__LAUNCH_TYPE": "FARGATE",
        "AIRFLOW__AWS_ECS_EXECUTOR__SUBNETS": "subnet-0a1b2c3d4e5f67890",
        "AIRFLOW__AWS_ECS_EXECUTOR__CHECK_HEALTH_ON_STARTUP": "False",
    }
)

from botocore.stub import Stubber  # noqa: E402

from airflow.models.taskinstancekey import TaskInstanceKey  # noqa: E402
from airflow.providers.amazon.aws.executors.ecs.ecs_executor import AwsEcsExecutor  # noqa: E402
from airflow.utils.state import TaskInstanceState  # noqa: E402

pytestmark = pytest.mark.requires_feature("aip-97-amazon")

#: Runs on the unpatched 3.3.2 core too (test_providers_on_unpatched_core.py), asserting the old
#: event shapes there; tests that need the AIP-97 core skip with "needs the AIP-97 core".
COVERS_UNPATCHED_CORE = True

KEY = TaskInstanceKey(dag_id="aip97_ecs", task_id="crunch", run_id="manual__1", try_number=1, map_index=-1)
COMMAND = ["python", "-m", "airflow.sdk.execution_time.execute_workload", "--json-string", "{}"]
ARN = "arn:aws:ecs:eu-west-1:123456789012:task/airflow/0f3b6a1c9d2e4f5a8b7c6d5e4f3a2b1c"


def _datetimes(value):
    """Turn the ISO timestamps of a CLI-shaped response into the datetimes botocore returns."""
    if isinstance(value, dict):
        return {
            k: datetime.datetime.fromisoformat(v)
            if k.endswith("At") and isinstance(v, str)
            else _datetimes(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_datetimes(v) for v in value]
    return value


def response(name: str) -> dict:
    return _datetimes(json.loads((ECS_FIXTURES / f"{name}.json").read_text()))


# DescribeTasks fixture, expected cause, expected reason
ROWS = [
    ("spot_interruption", INFRA, "SpotInterruption: Your Spot Task was interrupted."),
    (
        "termination_notice",
        INFRA,
        "TerminationNotice: Task stopped due to a scheduled AWS Fargate infrastructure retirement.",
    ),
    # TaskFailedToStart: the workload never ran. A configuration error (an image that does not
    # exist, a missing secret) is never infra: retrying cannot cure it. The detail stays in the reason.
    (
        "cannot_pull_container",
        UNKNOWN,
        "TaskFailedToStart: CannotPullContainerError: pull image manifest has been retried 5 time(s): "
        "failed to resolve ref 123456789012.dkr.ecr.eu-west-1.amazonaws.com/airflow:3.3.2: not found",
    ),
    (
        "missing_secret",
        UNKNOWN,
        "TaskFailedToStart: ResourceInitializationError: unable to pull secrets or registry auth: "
        "execution resource retrieval failed: unable to retrieve secret from asm: service call has been "
        "retried 1 time(s): failed to fetch secret arn:aws:secretsmanager:eu-west-1:123456789012:secret:"
        "airflow/connections/metadb-AbCdEf from secrets manager: ResourceNotFoundException: Secrets "
        "Manager can't find the specified secret.",
    ),
    # ... while the platform failing to start it is.
    (
        "network_interface_timeout",
        INFRA,
        "TaskFailedToStart: Timeout waiting for network interface provisioning to complete.",
    ),
    ("host_ec2_terminated", INFRA, "Host EC2 (instance i-0a1b2c3d4e5f67890) terminated."),
    (
        "essential_container_oom",
        OOM,
        "OOM-killed: container 'airflow-worker' memory limit 2048 MiB; EssentialContainerExited: "
        "Essential container in task exited (container 'airflow-worker' exit code 137 (OutOfMemoryError: "
        "Container killed due to memory usage))",
    ),
    (
        "user_initiated",
        UNKNOWN,
        "UserInitiated: Task stopped by user (container 'airflow-worker' exit code 143)",
    ),
    ("missing", UNKNOWN, "MISSING"),
]
ROW_REASONS = {name: reason for name, _, reason in ROWS}


@pytest.fixture
def executor():
    executor = AwsEcsExecutor()
    executor.max_run_task_attempts = "1"
    with Stubber(executor.ecs) as stubber:
        executor.stubber = stubber
        yield executor
        stubber.assert_no_pending_responses()


def launch(executor) -> None:
    """Queue the workload and let the executor start it with a (stubbed) RunTask call."""
    executor.stubber.add_response("run_task", response("run_task_provisioning"))
    if KEY not in executor.running:
        executor.execute_async(KEY, COMMAND)
        executor.running.add(KEY)
    for queued in executor.pending_workloads:  # skip the backoff delay of a resubmission
        queued.next_attempt_time = datetime.datetime.now(datetime.timezone.utc)
    executor.attempt_workload_runs()
    assert executor.active_workers.arn_to_key == {ARN: KEY}


def stop(executor, name: str) -> None:
    executor.stubber.add_response(
        "describe_tasks", response(f"describe_tasks_{name}"), {"tasks": [ARN], "cluster": "airflow"}
    )
    executor.sync_running_workloads()


def assert_failed(executor, cause: str, reason: str) -> None:
    state, info = executor.event_buffer[KEY]
    assert state == TaskInstanceState.FAILED
    got_cause, got_reason = event_failure(state, info)
    assert got_reason == reason
    assert got_cause == (cause if core_supports_failure_cause() else None)
    assert KEY not in executor.running


def test_schema_parses_stop_code():
    from airflow.providers.amazon.aws.executors.ecs.boto_schema import BotoDescribeTasksSchema

    (task,) = BotoDescribeTasksSchema().load(response("describe_tasks_spot_interruption"))["tasks"]
    assert task.stop_code == "SpotInterruption"
    assert task.stopped_reason == "Your Spot Task was interrupted."


@pytest.mark.parametrize(("name", "cause", "reason"), ROWS, ids=[r[0] for r in ROWS])
def test_stop_code_gives_cause(executor, name, cause, reason):
    launch(executor)
    stop(executor, name)
    assert_failed(executor, cause, reason)
    assert not executor.active_workers.arn_to_key


@pytest.mark.parametrize(
    ("first", "last", "cause", "reason"),
    [
        ("spot_interruption", "essential_container_oom", OOM, ROW_REASONS["essential_container_oom"]),
        ("essential_container_oom", "spot_interruption", INFRA, ROW_REASONS["spot_interruption"]),
    ],
)
def test_resubmission_reports_last_attempt(executor, first, last, cause, reason):
    """max_run_task_attempts keeps its meaning; the final failure carries the last attempt's cause."""
    executor.max_run_task_attempts = "2"
    launch(executor)
    stop(executor, first)
    assert KEY not in executor.event_buffer or executor.event_buffer[KEY][0] != TaskInstanceState.FAILED
    assert len(executor.pending_workloads) == 1  # resubmitted whatever the cause

    launch(executor)
    stop(executor, last)
    assert_failed(executor, cause, reason)


@pytest.mark.parametrize(
    ("name", "cause", "reason"),
    [
        # A full cluster and a task that fits no instance give the same answer: no evidence.
        ("resource_memory", UNKNOWN, "ECS RunTask failed 1 time(s): RESOURCE:MEMORY"),
        # Fargate says it is out of capacity: retrying later can cure it.
        (
            "capacity_unavailable",
            INFRA,
            "ECS RunTask failed 1 time(s): Capacity is unavailable at this time. Please try again later "
            "or in a different availability zone",
        ),
    ],
)
def test_run_task_failures(executor, name, cause, reason):
    executor.stubber.add_response("run_task", response(f"run_task_{name}"))
    executor.execute_async(KEY, COMMAND)
    executor.running.add(KEY)
    executor.attempt_workload_runs()
    assert_failed(executor, cause, reason)
