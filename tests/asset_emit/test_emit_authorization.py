"""
Declared publication end to end ([core] asset_emit_authorization = declared, the default).

Real api-server, Dag processor, scheduler and LocalExecutor task processes (the shared stack), and
the Dags of ``dags/emit_auth_dags.py``: each producer declares ``emit_auth_declared`` and tries
``emit_auth_target`` too, which only ``emit_auth_target_consumer`` schedules on.

* a task: the undeclared emit gets 403 and the SDK's typed ``AssetEmitNotDeclaredError`` naming the
  asset and the task; nothing is written and the consumer gets no run; the declared emit succeeds
  and its consumer runs;
* the same for a Dag-level callback (run by the Dag processor, no task: the Dag declares the union
  of its tasks' outlets) and for ``AssetEventNotifier`` at task and at Dag level;
* a request forged by a task's token, naming an asset another Dag declares, is refused by the
  token's identity, and a stated source naming the other Dag is refused as well.
"""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DECLARED = "emit_auth_declared"
TARGET = "emit_auth_target"


def _outcome(stack, name: str, timeout: float = 150) -> dict:
    path = stack.out / f"{name}.json"
    text = stack.wait_for(
        lambda: path.exists() and path.read_text(),
        timeout=timeout,
        what=f"{name}.json",
        logs=("dag-processor", "scheduler"),
    )
    return json.loads(text)


def _consumer_runs(stack, dag_id: str) -> list[dict]:
    resp = stack.rest("GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100})
    assert resp.status_code == 200, resp.text
    return [r for r in resp.json()["dag_runs"] if r["run_type"] == "asset_triggered"]


def _target_untouched(stack) -> None:
    """Nothing was ever written for the undeclared asset, and its consumer never ran."""
    assert stack.events(TARGET) == []
    assert stack.query(
        "SELECT count(*) AS n FROM asset_dag_run_queue q JOIN asset a ON a.id = q.asset_id "
        "WHERE a.name = %(n)s",
        n=TARGET,
    ) == [{"n": 0}]
    assert _consumer_runs(stack, "emit_auth_target_consumer") == []


def _assert_refused(refusal: dict, producer: str) -> None:
    assert refusal["raised"] == "AssetEmitNotDeclaredError", refusal
    assert refusal["typed"] is True
    assert (refusal["reason"], refusal["status_code"]) == ("asset_not_declared", 403)
    assert refusal["message"] == (
        f"Asset {TARGET!r} is not declared by {producer}: it may emit only to "
        + ("its outlets" if producer.startswith("task") else "the outlets of its tasks")
        + " ([core] asset_emit_authorization = declared); no event was emitted"
    )


def test_task_emits_only_to_its_outlets(stack):
    run_id = stack.trigger("emit_auth_task")
    assert stack.wait_run_finished("emit_auth_task", run_id) == "success"
    outcome = _outcome(stack, f"auth-task-{run_id}")

    _assert_refused(outcome["undeclared"], "task 'producer' of Dag 'emit_auth_task'")
    [event] = [e for e in stack.events(DECLARED) if e["id"] == outcome["declared"]]
    assert (event["source_dag_id"], event["source_task_id"], event["source_run_id"]) == (
        "emit_auth_task",
        "producer",
        run_id,
    )
    # The declared event starts its consumer (the task skipped: no outlet event was published) ...
    stack.wait_for(
        lambda: _consumer_runs(stack, "emit_auth_declared_consumer"),
        timeout=90,
        what="the declared asset's consumer run",
        logs=("scheduler",),
    )
    # ... in the scheduler loop that would have started the undeclared asset's consumer too.
    _target_untouched(stack)


@pytest.mark.timeout(420)
def test_dag_level_callback_emits_only_to_its_tasks_outlets(stack):
    run_id = stack.trigger("emit_auth_dag_callback")
    assert stack.wait_run_finished("emit_auth_dag_callback", run_id) == "failed"
    outcome = _outcome(stack, f"auth-dag-callback-{run_id}", timeout=300)

    _assert_refused(outcome["undeclared"], "Dag 'emit_auth_dag_callback' (a Dag-level callback)")
    [event] = [e for e in stack.events(DECLARED) if e["id"] == outcome["declared"]]
    assert (event["source_dag_id"], event["source_task_id"], event["source_run_id"]) == (
        "emit_auth_dag_callback",
        None,
        run_id,
    )
    _target_untouched(stack)


@pytest.mark.timeout(420)
def test_notifiers_emit_only_to_declared_assets(stack):
    run_id = stack.trigger("emit_auth_notifier")
    assert stack.wait_run_finished("emit_auth_notifier", run_id) == "failed"

    def notified():
        found = {
            (e["extra"] or {}).get("via"): e
            for e in stack.events(DECLARED)
            if e["source_run_id"] == run_id and e["source_dag_id"] == "emit_auth_notifier"
        }
        return found if {"task_notifier", "dag_notifier"} <= set(found) else None

    found = stack.wait_for(notified, timeout=300, what="both notifiers' events", logs=("dag-processor",))
    assert found["task_notifier"]["source_task_id"] == "fails_with_notifiers"
    assert found["dag_notifier"]["source_task_id"] is None
    # The undeclared notifiers were refused: the task's log says why, naming the asset and the task.
    logs = stack.task_logs("emit_auth_notifier", run_id, chars=200_000)
    assert "AssetEmitNotDeclaredError" in logs, logs[-4000:]
    assert (
        f"Asset {TARGET!r} is not declared by task 'fails_with_notifiers' of Dag 'emit_auth_notifier'" in logs
    )
    _target_untouched(stack)


def test_forged_request_is_refused_by_the_callers_identity(stack, seed_ti):
    """A task's own token, naming an asset another Dag declares: the token's task decides."""
    run_id = stack.trigger("emit_auth_task")
    assert stack.wait_run_finished("emit_auth_task", run_id) == "success"
    [ti] = stack.query(
        "SELECT id FROM task_instance WHERE dag_id = 'emit_auth_task' AND run_id = %(r)s", r=run_id
    )
    token = stack.token_for(ti["id"])
    before = len(stack.events("emit_test_api_target"))

    # emit_test_api_target is an outlet of emit_test_seed, not of emit_auth_task.
    resp = stack.emit(token, {"name": "emit_test_api_target", "idempotency_key": f"forged-{run_id}"})
    assert resp.status_code == 403, resp.text
    assert resp.json()["detail"] == {
        "reason": "asset_not_declared",
        "message": "Asset 'emit_test_api_target' is not declared by task 'producer' of Dag "
        "'emit_auth_task': it may emit only to its outlets ([core] asset_emit_authorization = declared); "
        "no event was emitted",
    }
    # Naming the declaring Dag as the source does not help: a caller cannot state its identity.
    resp = stack.emit(
        token,
        {
            "name": "emit_test_api_target",
            "idempotency_key": f"forged-source-{run_id}",
            "source": {"dag_id": seed_ti["dag_id"], "run_id": seed_ti["run_id"], "task_id": "seed"},
        },
    )
    assert resp.status_code == 403, resp.text
    assert resp.json()["detail"]["reason"] == "source_not_allowed"
    assert len(stack.events("emit_test_api_target")) == before
    # The declaring Dag's own token may.
    ok = stack.emit(
        stack.token_for(seed_ti["id"]), {"name": "emit_test_api_target", "idempotency_key": f"own-{run_id}"}
    )
    assert ok.status_code == 201, ok.text
