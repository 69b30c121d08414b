"""
Rollback from the patched build to vanilla Airflow, as docs/operations.md ("Rollback") writes it.

On SQLite and PostgreSQL, from a database the patched build filled with every kind of patch-set
state (``dags/ops_state.py``: a granted infrastructure retry with its history rows, a cap reached,
an opt-out, causes from the executor, the task's code and its timeout, asset events with
idempotency keys, the storm guard's shared state):

1. the downgrade run with the **vanilla** build fails with an error naming the revision it does not
   know, and changes nothing (bad input, docs "If you ran the downgrade with the vanilla image");
2. the documented downgrade, run with the patched build (upstream's ``airflow db downgrade``:
   ``--to-version 3.3.2`` on the 3.3 line; ``--to-revision 9cffe90fa0c0``, vanilla 3.4.0b2's head, on
   the 3.4 line, where ``--to-version 3.4.0`` names the series' own head), leaves vanilla's head;
3. vanilla Airflow of the line, installed from the pinned wheels in its own venv, accepts the
   database (``airflow db check-migrations``), keeps every Dag run, task instance (3.3: and history
   row) and asset event, loses only the patch set's columns and tables, reports the Dag that still
   passes ``max_infra_retries`` as an import error, and runs a new Dag run to success.
"""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    PATCHED_HEAD,
    PATCHED_VENV,
    ROLLBACK_COMMAND,
    STATE_DAGS_FILE,
    VANILLA_DAGS_FILE,
    VANILLA_HEAD,
    build_patched_state,
    ops_stack,
    run_dags,
)

import harness
import lines

#: What the downgrade drops: the patch set's columns and its tables. Everything else stays.
PATCH_COLUMNS = {"failure_cause", "failure_reason", "infra_retry_count", "memory_escalation"}
EMIT_COLUMNS = {"emit_chain", "emit_chain_stop_reason"}  # asset-emit's loop protection, on asset_event
PATCH_TABLE = "asset_event_idempotency_key"
GUARD_TABLE = "infra_retry_storm_guard"  # retry-rules: the storm guard's state, shared by the schedulers
PATCH_TABLES = {PATCH_TABLE, GUARD_TABLE}
HISTORY = lines.LINE == lines.DEFAULT_LINE  # 3.3 keeps past tries in task_instance_history


def _revision(url: str) -> str:
    return harness.query(url, "SELECT version_num FROM alembic_version")[0]["version_num"]


def _schema(url: str) -> dict[str, Any]:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        insp = sa.inspect(engine)
        tables = set(insp.get_table_names())
        # Every table's columns: a column the series adds to any table is dropped by the downgrade.
        return {"tables": tables, "columns": {t: {c["name"] for c in insp.get_columns(t)} for t in tables}}
    finally:
        engine.dispose()


def _added_columns(table: str) -> set[str]:
    """The columns the series adds to ``table`` (section 8 of docs/operations.md, "What is lost")."""
    if table == "task_instance" or (HISTORY and table == "task_instance_history"):
        return PATCH_COLUMNS
    if table == "asset_event":
        return EMIT_COLUMNS
    return set()


def _kept(url: str) -> dict[str, Any]:
    """What a rollback must keep: every Dag run, try and asset event, with its identity and state."""
    snapshot = {
        "dag_run": harness.query(url, "SELECT id, dag_id, run_id, state FROM dag_run ORDER BY id"),
        "task_instance": harness.query(
            url, "SELECT id, dag_id, task_id, run_id, try_number, state FROM task_instance ORDER BY id"
        ),
        "asset_event": harness.query(url, "SELECT id, asset_id, extra, timestamp FROM asset_event ORDER BY id"),
    }
    if HISTORY:
        snapshot["task_instance_history"] = harness.query(
            url,
            "SELECT task_instance_id AS id, dag_id, task_id, run_id, try_number, state FROM task_instance_history ORDER BY task_instance_id",
        )
    for table in snapshot.values():
        for row in table:
            row["id"] = str(row["id"]).replace("-", "")
    return snapshot


def _state_present(url: str) -> None:
    """The database holds every kind of state the patch set adds (the premise of the test)."""
    past = lines.PAST_TRIES
    causes = {r["c"] for r in harness.query(url, f"SELECT DISTINCT failure_cause AS c FROM {past}")}
    causes |= {r["c"] for r in harness.query(url, f"SELECT DISTINCT failure_cause AS c FROM {lines.LIVE_TRIES}")}
    assert {"infra", "application", "timeout"} <= causes, causes
    granted = harness.query(url, f"SELECT task_id, infra_retry_count FROM {lines.LIVE_TRIES} WHERE infra_retry_count > 0")
    assert {(r["task_id"], r["infra_retry_count"]) for r in granted} == {("lose_worker_once", 1), ("lose_always", 1)}
    assert harness.query(url, f"SELECT 1 FROM {past} WHERE failure_cause = 'infra'"), "no history row of an infra try"
    assert len(harness.query(url, f"SELECT idempotency_key FROM {PATCH_TABLE}")) == 2


def _guard_state(url: str) -> None:
    """A storm guard engaged for a queue, as a storm leaves it (its rows are transient: written here)."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    f"INSERT INTO {GUARD_TABLE} (executor, queue, failures, engaged, next_release_at, held, updated_at) "
                    "VALUES ('CeleryExecutor', 'spot', '[1764900000.5, 1764900001.25]', :t, :now, 3, :now)"
                ),
                {"t": True, "now": datetime.datetime.now(datetime.UTC)},
            )
    finally:
        engine.dispose()
    assert len(harness.query(url, f"SELECT queue FROM {GUARD_TABLE}")) >= 1


@pytest.mark.e2e
@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_rollback_to_vanilla(backend: str, tmp_path: Path, vanilla_venv: Path, request) -> None:
    # PostgreSQL: a copy of the patched build's migrated template, filled here; SQLite: a copy of the
    # session's filled database.
    migrated_by = PATCHED_VENV if backend == "postgresql" else None
    with harness.backend_database(backend, tmp_path, "t_ops_rollback", migrated_by=migrated_by) as url:
        if backend == "sqlite":
            shutil.copy(request.getfixturevalue("patched_state_sqlite")["db"], tmp_path / "airflow.db")
        else:
            build_patched_state(url, tmp_path / "home-patched")
        _state_present(url)
        _guard_state(url)
        before = _kept(url)
        schema_before = _schema(url)
        for table in ("task_instance", "asset_event") + (("task_instance_history",) if HISTORY else ()):
            assert _added_columns(table) <= schema_before["columns"][table], table
        assert _revision(url) == PATCHED_HEAD[lines.LINE]

        # 1. The downgrade run with the vanilla build: a clear error, nothing changed.
        vanilla = harness.AirflowEnv(vanilla_venv, tmp_path / "home-vanilla-cli", db_url=url)
        wrong = vanilla.airflow(*ROLLBACK_COMMAND[lines.LINE], "-y", check=False, timeout=300)
        assert wrong.returncode != 0
        assert f"Can't locate revision identified by '{PATCHED_HEAD[lines.LINE]}'" in wrong.stdout + wrong.stderr
        assert _revision(url) == PATCHED_HEAD[lines.LINE]
        assert _schema(url) == schema_before
        assert _kept(url) == before

        # 2. The documented command, with the patched build. (On 3.4, --to-version 3.4.0 is no way
        # back: the series maps "3.4.0" to its own head, so it changes nothing.)
        patched = harness.AirflowEnv(PATCHED_VENV, tmp_path / "home-patched-cli", db_url=url)
        if lines.LINE == "3.4":
            patched.airflow("db", "downgrade", "--to-version", "3.4.0", "-y", timeout=300)
            assert _revision(url) == PATCHED_HEAD[lines.LINE]
            assert _schema(url) == schema_before
        patched.airflow(*ROLLBACK_COMMAND[lines.LINE], "-y", timeout=600)
        assert _revision(url) == VANILLA_HEAD[lines.LINE]
        schema = _schema(url)
        assert not PATCH_TABLES & schema["tables"]
        assert schema["tables"] == schema_before["tables"] - PATCH_TABLES
        for table, columns in schema["columns"].items():
            assert not columns & (PATCH_COLUMNS | EMIT_COLUMNS), (table, columns & (PATCH_COLUMNS | EMIT_COLUMNS))
            assert columns == schema_before["columns"][table] - _added_columns(table), table

        # 3. Vanilla accepts the database and keeps every row.
        check = vanilla.airflow("db", "check-migrations", "--migration-wait-timeout", "30", timeout=120)
        assert check.returncode == 0
        assert _kept(url) == before

        # ... its `airflow db migrate` is a no-op (docs: step 5) ...
        vanilla.airflow("db", "migrate", timeout=600)
        assert _revision(url) == VANILLA_HEAD[lines.LINE]
        assert _kept(url) == before

        # ... and it runs a new Dag run to success. The Dag file that still passes max_infra_retries is
        # an import error on vanilla (docs: remove the argument before rolling back).
        import_error = "SELECT stacktrace FROM import_error WHERE filename LIKE '%%ops_state.py'"
        with ops_stack(
            "t_ops_vanilla", vanilla_venv, tmp_path / "home-vanilla", (VANILLA_DAGS_FILE, STATE_DAGS_FILE), db_url=url
        ) as stack:
            run_dags(stack, ("ops_after_rollback",), timeout=240)
            stack.wait_for(lambda: stack.query(import_error), timeout=60, what="the import error of ops_state.py")
        new_run = harness.query(url, "SELECT state FROM dag_run WHERE dag_id = 'ops_after_rollback'")
        assert [r["state"] for r in new_run] == ["success"]
        stacktrace = harness.query(url, import_error)[0]
        assert "max_infra_retries" in stacktrace["stacktrace"]
        after = _kept(url)
        for table, old_rows in before.items():
            # Every old row is still there, unchanged (vanilla only added the new run's rows).
            new_rows = {r["id"]: r for r in after[table]}
            for row in old_rows:
                assert new_rows.get(row["id"]) == row, (table, row)
