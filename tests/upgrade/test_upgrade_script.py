"""
``dev/upgrade_from_3_3.py`` on small databases laid out like patched and pristine 3.3.2 (and, for
``restore``, like 3.4 after ``airflow db migrate``), on real SQLite and PostgreSQL.

What ``prepare`` refuses (no Airflow database, an unknown revision, a half-applied migration), what
it carries and stamps, that a second run changes nothing, and that a failure part-way through (after
two of the three migrations were undone: SQLite table rebuilds) leaves the database as it was; that
``restore`` refuses before the migrate, fills what the 3.4 schema holds into the same try's row
(native UUID ids on PostgreSQL), never overwrites a value 3.4 recorded, keeps the rest, and is
re-runnable. The real end-to-end upgrade is test_upgrade_from_3_3.py.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[2]
TRY_COLS = "dag_id VARCHAR(250), task_id VARCHAR(250), run_id VARCHAR(250), map_index INTEGER, try_number INTEGER, state VARCHAR(20)"
OURS = "failure_cause VARCHAR(20), failure_reason VARCHAR(1000), infra_retry_count INTEGER DEFAULT 0 NOT NULL"


@pytest.fixture(scope="module")
def up() -> ModuleType:
    spec = importlib.util.spec_from_file_location("upgrade_from_3_3", REPO / "dev" / "upgrade_from_3_3.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _db(tmp_path: Path, revision: str | None, *, ours: bool, idempotency: bool) -> str:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    extra = f", {OURS}" if ours else ""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        if revision:
            conn.exec_driver_sql("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
            conn.exec_driver_sql(f"INSERT INTO alembic_version VALUES ('{revision}')")
        conn.exec_driver_sql(f"CREATE TABLE task_instance (id CHAR(32) PRIMARY KEY, {TRY_COLS}{extra})")
        conn.exec_driver_sql(
            f"CREATE TABLE task_instance_history (task_instance_id CHAR(32) PRIMARY KEY, {TRY_COLS}{extra})"
        )
        conn.exec_driver_sql("CREATE TABLE asset_event (id INTEGER PRIMARY KEY, asset_id INTEGER)")
        if ours:
            conn.exec_driver_sql(
                "INSERT INTO task_instance VALUES ('a1', 'd', 't', 'r', -1, 2, 'success', NULL, NULL, 1)"
            )
            conn.exec_driver_sql(
                "INSERT INTO task_instance_history VALUES ('a0', 'd', 't', 'r', -1, 1, 'failed', 'infra', 'lost', 0)"
            )
        if idempotency:
            conn.exec_driver_sql(
                "CREATE TABLE asset_event_idempotency_key (asset_id INTEGER NOT NULL, idempotency_key VARCHAR(250) "
                "NOT NULL, asset_event_id INTEGER, created_at TIMESTAMP NOT NULL, PRIMARY KEY (asset_id, idempotency_key))"
            )
            conn.exec_driver_sql(
                "CREATE INDEX idx_asset_event_idempotency_key_event_id ON asset_event_idempotency_key (asset_event_id)"
            )
            conn.exec_driver_sql("INSERT INTO asset_event VALUES (7, 3)")
            conn.exec_driver_sql(
                "INSERT INTO asset_event_idempotency_key VALUES (3, 'k', 7, '2026-12-01 00:00:00')"
            )
    engine.dispose()
    return url


def _dump(url: str) -> dict:
    engine = sa.create_engine(url)
    try:
        insp = sa.inspect(engine)
        with engine.connect() as conn:
            return {
                t: {
                    "columns": [c["name"] for c in insp.get_columns(t)],
                    "rows": sorted(map(tuple, conn.execute(sa.text(f"SELECT * FROM {t}")))),
                }
                for t in insp.get_table_names()
            }
    finally:
        engine.dispose()


def test_refuses_a_database_without_alembic_version(up, tmp_path):
    url = _db(tmp_path, None, ours=False, idempotency=False)
    with pytest.raises(up.Refused, match="not an Airflow metadata database"):
        up.prepare(up.make_engine(url))


def test_refuses_an_unknown_revision_and_changes_nothing(up, tmp_path):
    url = _db(tmp_path, "0123456789ab", ours=True, idempotency=True)
    before = _dump(url)
    with pytest.raises(up.Refused, match="0123456789ab"):
        up.prepare(up.make_engine(url))
    assert _dump(url) == before


def test_refuses_a_half_applied_migration(up, tmp_path):
    url = _db(tmp_path, "704a18c1acc7", ours=False, idempotency=False)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "ALTER TABLE task_instance ADD COLUMN infra_retry_count INTEGER DEFAULT 0 NOT NULL"
        )
    engine.dispose()
    with pytest.raises(up.Refused, match="aip-122's migration 704a18c1acc7 is only partly present"):
        up.prepare(up.make_engine(url))


def test_pristine_332_has_nothing_to_carry(up, tmp_path):
    url = _db(tmp_path, "d2f4e1b3c5a7", ours=False, idempotency=False)
    before = _dump(url)
    assert up.prepare(up.make_engine(url), out=lambda *_: None)["action"] == "none"
    assert _dump(url) == before


def test_prepare_carries_undoes_and_stamps_then_is_a_no_op(up, tmp_path):
    url = _db(tmp_path, "704a18c1acc7", ours=True, idempotency=True)
    result = up.prepare(up.make_engine(url), out=lambda *_: None)
    assert result["features"] == ["aip-122", "aip-97", "asset-emit"]
    after = _dump(url)
    assert after["alembic_version"]["rows"] == [("d2f4e1b3c5a7",)]
    assert "asset_event_idempotency_key" not in after
    for table in ("task_instance", "task_instance_history"):
        assert not {"failure_cause", "failure_reason", "infra_retry_count"} & set(after[table]["columns"])
    values = {(r[0], r[1]): r[2] for r in after["patchset_upgrade_ti_value"]["rows"]}
    # Only non-empty values are carried; the history row's infra_retry_count 0 is not.
    assert values == {
        ("a1", "infra_retry_count"): "1",
        ("a0", "failure_cause"): "infra",
        ("a0", "failure_reason"): "lost",
    }
    assert [r[:3] for r in after["patchset_upgrade_asset_event_idempotency_key"]["rows"]] == [(3, "k", 7)]

    assert up.prepare(up.make_engine(url), out=lambda *_: None)["action"] == "none"
    assert _dump(url) == after


def test_prepare_drops_the_emit_chain_columns(up, tmp_path):
    """asset-emit's loop protection (a3f9c2e7b5d1): its asset_event columns are undone, not carried."""
    url = _db(tmp_path, "a3f9c2e7b5d1", ours=False, idempotency=True)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE asset_event ADD COLUMN emit_chain JSON")
        conn.exec_driver_sql("ALTER TABLE asset_event ADD COLUMN emit_chain_stop_reason TEXT")
        conn.exec_driver_sql("UPDATE asset_event SET emit_chain = '[]'")
    engine.dispose()
    result = up.prepare(up.make_engine(url), out=lambda *_: None)
    assert result["features"] == ["asset-emit", "asset-emit-chain"]
    after = _dump(url)
    assert after["alembic_version"]["rows"] == [("d2f4e1b3c5a7",)]
    assert set(after["asset_event"]["columns"]) == {"id", "asset_id"}
    assert after["asset_event"]["rows"] == [(7, 3)]


def test_prepare_carries_and_drops_the_storm_guard_table(up, tmp_path):
    """The series' 3.3 head since retry-rules keeps the storm guard's state in a table of its own."""
    url = _db(tmp_path, "3b8d6f2a9c41", ours=True, idempotency=True)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE infra_retry_storm_guard (executor VARCHAR(250) NOT NULL, queue VARCHAR(256) NOT NULL, "
            "failures JSON NOT NULL, engaged BOOLEAN NOT NULL, next_release_at TIMESTAMP, held INTEGER NOT NULL, "
            "updated_at TIMESTAMP NOT NULL, CONSTRAINT infra_retry_storm_guard_pkey PRIMARY KEY (executor, queue))"
        )
        conn.exec_driver_sql(
            "INSERT INTO infra_retry_storm_guard VALUES ('CeleryExecutor', 'spot', '[1.5]', 1, NULL, 2, "
            "'2026-12-05 00:00:00')"
        )
    engine.dispose()
    result = up.prepare(up.make_engine(url), out=lambda *_: None)
    assert result["features"] == ["aip-122", "aip-97", "asset-emit", "retry-rules"]
    assert result["counts"]["infra_retry_storm_guard"] == 1
    after = _dump(url)
    assert after["alembic_version"]["rows"] == [("d2f4e1b3c5a7",)]
    assert "infra_retry_storm_guard" not in after
    assert [r[:2] for r in after["patchset_upgrade_infra_retry_storm_guard"]["rows"]] == [("CeleryExecutor", "spot")]


def test_prepare_carries_and_drops_memory_escalation(up, tmp_path):
    """The series' 3.3 head since issue 37 §3: each try's memory escalation (JSON) is carried too."""
    url = _db(tmp_path, "9c3e5a7f1d24", ours=True, idempotency=True)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE infra_retry_storm_guard (executor VARCHAR(250) NOT NULL, queue VARCHAR(256) NOT NULL, "
            "failures JSON NOT NULL, engaged BOOLEAN NOT NULL, next_release_at TIMESTAMP, held INTEGER NOT NULL, "
            "updated_at TIMESTAMP NOT NULL, CONSTRAINT infra_retry_storm_guard_pkey PRIMARY KEY (executor, queue))"
        )
        for table in ("task_instance", "task_instance_history"):
            conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN memory_escalation JSON")
        conn.exec_driver_sql(
            """UPDATE task_instance SET memory_escalation = '{"step": 1, "queue": "highmem"}' WHERE id = 'a1'"""
        )
    engine.dispose()
    result = up.prepare(up.make_engine(url), out=lambda *_: None)
    assert result["features"] == ["aip-122", "aip-97", "asset-emit", "oom", "retry-rules"]
    after = _dump(url)
    assert after["alembic_version"]["rows"] == [("d2f4e1b3c5a7",)]
    for table in ("task_instance", "task_instance_history"):
        assert "memory_escalation" not in after[table]["columns"]
    values = {(r[0], r[1]): r[2] for r in after["patchset_upgrade_ti_value"]["rows"]}
    assert json.loads(values[("a1", "memory_escalation")]) == {"step": 1, "queue": "highmem"}
    assert ("a0", "memory_escalation") not in values  # NULL: nothing to carry
    assert up._to_python(sa.Column("memory_escalation", sa.JSON()), values[("a1", "memory_escalation")]) == {
        "step": 1,
        "queue": "highmem",
    }


def test_the_storm_guard_table_without_its_revision_is_refused(up, tmp_path):
    """aip-122's head with the storm guard's table is no series' state: refused, nothing changed."""
    url = _db(tmp_path, "704a18c1acc7", ours=True, idempotency=True)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE infra_retry_storm_guard (executor VARCHAR(250), queue VARCHAR(256))")
    engine.dispose()
    before = _dump(url)
    with pytest.raises(up.Refused, match="retry-rules"):
        up.prepare(up.make_engine(url), out=lambda *_: None)
    assert _dump(url) == before


def test_a_failure_part_way_leaves_the_database_as_it_was(up, tmp_path, monkeypatch):
    url = _db(tmp_path, "704a18c1acc7", ours=True, idempotency=True)
    before = _dump(url)
    real_drop = up._drop

    def drop(conn, migration):
        if migration.feature == "asset-emit":  # the last one undone: aip-122's and aip-97's rebuilds are done
            raise RuntimeError("injected failure")
        real_drop(conn, migration)

    monkeypatch.setattr(up, "_drop", drop)
    with pytest.raises(RuntimeError, match="injected failure"):
        up.prepare(up.make_engine(url), out=lambda *_: None)
    assert _dump(url) == before


def _as_migrated_to_34(url: str, head: str) -> None:
    """What 3.4's migrate does to the prepared database, as far as restore cares: history rows become
    archived task_instance rows with the same UUID (0142), and the 3.4 build here has failure_cause /
    failure_reason (the 3.4 aip-97 port) and the idempotency table (the 3.4 asset-emit port), but no
    infra_retry_count: a 3.4 build without aip-122, whose held values restore reports as no_column and
    keeps (test_upgrade_from_3_3.py migrates with the real 3.4 build, which has the column)."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO task_instance SELECT task_instance_id, dag_id, task_id, run_id, map_index, try_number, state "
            "FROM task_instance_history"
        )
        conn.exec_driver_sql("DROP TABLE task_instance_history")
        conn.exec_driver_sql("ALTER TABLE task_instance ADD COLUMN failure_cause VARCHAR(20)")
        conn.exec_driver_sql("ALTER TABLE task_instance ADD COLUMN failure_reason VARCHAR(1000)")
        conn.exec_driver_sql(
            "CREATE TABLE asset_event_idempotency_key (asset_id INTEGER NOT NULL, idempotency_key VARCHAR(250) "
            "NOT NULL, asset_event_id INTEGER REFERENCES asset_event(id), created_at TIMESTAMP NOT NULL, "
            "PRIMARY KEY (asset_id, idempotency_key))"
        )
        conn.exec_driver_sql(f"UPDATE alembic_version SET version_num = '{head}'")
    engine.dispose()


def test_restore_fills_what_34_holds_keeps_the_rest_and_never_overwrites(up, tmp_path):
    url = _db(tmp_path, "704a18c1acc7", ours=True, idempotency=True)
    engine = up.make_engine(url)
    up.prepare(engine, out=lambda *_: None)
    # Not migrated yet: restore refuses and changes nothing.
    before = _dump(url)
    with pytest.raises(up.Refused, match="run `airflow db migrate`"):
        up.restore(engine, out=lambda *_: None)
    assert _dump(url) == before

    _as_migrated_to_34(url, up.installed_script().get_current_head())
    # A value the 3.4 build recorded itself is never overwritten.
    raw = sa.create_engine(url)
    with raw.begin() as conn:
        conn.exec_driver_sql("UPDATE task_instance SET failure_reason = 'recorded by 3.4' WHERE id = 'a0'")
    raw.dispose()

    result = up.restore(engine, out=lambda *_: None)
    assert result["report"]["failure_cause"]["restored"] == 1
    assert result["report"]["failure_reason"]["conflict"] == 1
    assert result["report"]["infra_retry_count"]["no_column"] == 1
    assert result["report"]["asset_event_idempotency_key"]["restored"] == 1
    after = _dump(url)
    rows = {r[0]: r for r in after["task_instance"]["rows"]}
    assert rows["a0"][-2:] == ("infra", "recorded by 3.4")  # the archived try got its cause back
    assert [r[:3] for r in after["asset_event_idempotency_key"]["rows"]] == [(3, "k", 7)]
    held = {(r[0], r[1]) for r in after["patchset_upgrade_ti_value"]["rows"]}
    assert held == {("a0", "failure_reason"), ("a1", "infra_retry_count")}
    assert after["patchset_upgrade_asset_event_idempotency_key"]["rows"] == []

    # Re-running changes nothing (but the time and report of the last restore).
    up.restore(engine, out=lambda *_: None)
    again = _dump(url)
    assert {k: v for k, v in again.items() if k != "patchset_upgrade_state"} == {
        k: v for k, v in after.items() if k != "patchset_upgrade_state"
    }


@pytest.mark.postgres
def test_prepare_and_restore_on_postgresql_with_uuid_ids(up, tmp_path):
    """The same carry and restore on PostgreSQL, where task_instance.id is a native UUID."""
    sys.path.insert(0, str(REPO / "tests"))
    import harness

    harness.require_postgres()
    live, archived = "0190a0b0-0000-7000-8000-000000000001", "0190a0b0-0000-7000-8000-000000000002"
    with harness.pg_database("t_upgrade_prep") as url:
        raw = sa.create_engine(url)
        with raw.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
            conn.exec_driver_sql("INSERT INTO alembic_version VALUES ('5c1e97a4f0b3')")  # aip-97 alone
            cols = f"{TRY_COLS}, failure_cause VARCHAR(20), failure_reason VARCHAR(1000)"
            conn.exec_driver_sql(f"CREATE TABLE task_instance (id UUID PRIMARY KEY, {cols})")
            conn.exec_driver_sql(
                f"CREATE TABLE task_instance_history (task_instance_id UUID PRIMARY KEY, {cols})"
            )
            conn.exec_driver_sql(
                f"INSERT INTO task_instance VALUES ('{live}', 'd', 't', 'r', -1, 2, 'failed', 'application', 'boom')"
            )
            conn.exec_driver_sql(
                f"INSERT INTO task_instance_history VALUES ('{archived}', 'd', 't', 'r', -1, 1, 'failed', 'infra', 'lost')"
            )
        engine = up.make_engine(url)
        assert up.prepare(engine, out=lambda *_: None)["features"] == ["aip-97"]
        with raw.begin() as conn:  # as 3.4's migrate leaves it, with the 3.4 aip-97 port's columns
            conn.exec_driver_sql(
                "INSERT INTO task_instance SELECT task_instance_id, dag_id, task_id, run_id, map_index, "
                "try_number, state FROM task_instance_history"
            )
            conn.exec_driver_sql("DROP TABLE task_instance_history")
            conn.exec_driver_sql(
                "ALTER TABLE task_instance ADD COLUMN failure_cause VARCHAR(20), ADD COLUMN failure_reason VARCHAR(1000)"
            )
            conn.execute(
                sa.text("UPDATE alembic_version SET version_num = :h"),
                {"h": up.installed_script().get_current_head()},
            )
        result = up.restore(engine, out=lambda *_: None)
        assert result["report"]["failure_cause"]["restored"] == 2, result
        with raw.connect() as conn:
            got = dict(
                conn.exec_driver_sql(
                    "SELECT id::text, failure_cause || ':' || failure_reason FROM task_instance"
                ).all()
            )
            assert got == {live: "application:boom", archived: "infra:lost"}
            assert not conn.execute(sa.text("SELECT to_regclass('patchset_upgrade_ti_value')")).scalar()
        engine.dispose()
        raw.dispose()


def test_refuses_to_prepare_with_a_33_installation(up, tmp_path, capsys):
    """With 3.3's venv, `run`'s `airflow db migrate` would re-apply our 3.3 migrations: refuse first."""
    from importlib.metadata import version

    if not version("apache-airflow-core").startswith("3.3."):
        pytest.skip("needs the 3.3 line's venv")
    url = _db(tmp_path, "704a18c1acc7", ours=True, idempotency=True)
    before = _dump(url)
    assert up.main(["run", "--conn", url]) == 2
    assert "run this with the 3.4 installation" in capsys.readouterr().err
    assert _dump(url) == before
