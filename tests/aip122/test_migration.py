"""
The ``infra_retry_count`` migration on real databases that hold task instances and their past tries.

3.3: migration 0126 adds the column to task_instance and task_instance_history. 3.4: migration 0150
adds it to task_instance only, which holds every try (archived tries are rows with
``working_set IS NULL``).

For SQLite and PostgreSQL: ``airflow db migrate`` to head, ``airflow dags test`` of a Dag whose
second task fails once and is retried (a live row per task and one past try), then downgrade to
AIP-97's revision and upgrade again, checking the columns and that no row is lost. On PostgreSQL the
upgrade must not rewrite the tables: their ``relfilenode`` stays the same, and the offline SQL is a
single ``ADD COLUMN ... DEFAULT 0 NOT NULL`` per table.
"""

from __future__ import annotations

import contextlib
import datetime
import shutil
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import harness  # noqa: E402
import lines  # noqa: E402
from lines import LIVE_TRIES, PAST_TRIES  # noqa: E402

VENV = Path(sys.executable).parent.parent
# The migration and the AIP-97 revision it revises, per line (3.4: 0150 after aip-97's 0149, with
# its own revision id), and the tables that get the column (3.4 has no task_instance_history).
_REVISIONS = {
    "3.3": ("704a18c1acc7", "5c1e97a4f0b3", ("task_instance", "task_instance_history")),
    "3.4": ("9f4bf13695f5", "cf95d8194a28", ("task_instance",)),
}
REVISION, DOWN_REVISION, TABLES = _REVISIONS[lines.LINE]
#: retry-rules' storm guard table follows aip-122's migration (issue 36 §5), per line.
GUARD_REVISION = {"3.3": "3b8d6f2a9c41", "3.4": "5e2a7c9d1b63"}[lines.LINE]
GUARD_TABLE = "infra_retry_storm_guard"
#: oom's memory_escalation column follows it (issue 37 §3), per line: the head of the full series.
OOM_REVISION = {"3.3": "9c3e5a7f1d24", "3.4": "4d7a1c9e3f58"}[lines.LINE]


def _series_head() -> str:
    """The installed series' migration head: aip-122's, or retry-rules' when that feature is in the build."""
    from airflow.utils.db import _REVISION_HEADS_MAP

    return _REVISION_HEADS_MAP["3.4.0"]
# The live row of each task instance and its past tries, on either line.
SOURCES = {"live": LIVE_TRIES, "past": PAST_TRIES}


def _database(backend: str, tmp_path: Path, **kwargs) -> contextlib.AbstractContextManager[str]:
    return harness.backend_database(backend, tmp_path, "t_aip122_mig", **kwargs)

def _state(url: str) -> dict:
    engine = sa.create_engine(url)
    try:
        insp = sa.inspect(engine)
        with engine.connect() as conn:
            out = {
                "revision": conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one(),
                "columns": {t: {c["name"]: c for c in insp.get_columns(t)} for t in TABLES},
                "rows": {
                    k: sorted(
                        tuple(r)
                        for r in conn.execute(
                            sa.text(
                                f"SELECT dag_id, task_id, run_id, try_number, state, max_tries FROM {src}"
                            )
                        )
                    )
                    for k, src in SOURCES.items()
                },
            }
            if engine.dialect.name == "postgresql":
                out["relfilenode"] = {
                    t: conn.execute(
                        sa.text("SELECT relfilenode FROM pg_class WHERE relname = :t"), {"t": t}
                    ).scalar_one()
                    for t in TABLES
                }
            if "infra_retry_count" in out["columns"]["task_instance"]:
                out["counts"] = {
                    k: [r[0] for r in conn.execute(sa.text(f"SELECT infra_retry_count FROM {src}"))]
                    for k, src in SOURCES.items()
                }
        return out
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.timeout(240)
def test_upgrade_and_downgrade_with_rows(backend, tmp_path):
    # At the head: a copy of the template `airflow db migrate` made for this venv build.
    with _database(backend, tmp_path, migrated_by=VENV) as url:
        env = harness.AirflowEnv(VENV, tmp_path / "home", db_url=url)
        shutil.copy(HERE / "dags" / "aip122_mig_dag.py", env.dags_folder)
        env.airflow("dags", "test", "aip122_mig", timeout=180)
        head = _state(url)
        assert head["revision"] == _series_head()
        assert head["revision"] in (REVISION, GUARD_REVISION, OOM_REVISION)
        assert len(head["rows"]["live"]) == 2
        assert len(head["rows"]["past"]) == 1  # flaky's first try
        assert head["counts"] == {"live": [0, 0], "past": [0]}

        env.airflow("db", "downgrade", "-r", DOWN_REVISION, "-y", timeout=300)
        down = _state(url)
        assert down["revision"] == DOWN_REVISION
        for table in TABLES:
            assert "infra_retry_count" not in down["columns"][table]
            assert "failure_cause" in down["columns"][table]  # AIP-97's columns stay
        assert down["rows"] == head["rows"]

        env.airflow("db", "migrate", timeout=300)
        up = _state(url)
        assert up["revision"] == head["revision"]
        assert up["rows"] == head["rows"]
        assert up["counts"] == head["counts"]
        for table in TABLES:
            col = up["columns"][table]["infra_retry_count"]
            assert isinstance(col["type"], sa.Integer)
            assert col["nullable"] is False
            assert "0" in str(col["default"])
        if backend == "postgresql":
            # ADD COLUMN with a constant default is metadata-only: the table files were not rewritten.
            assert up["relfilenode"] == down["relfilenode"]


@pytest.mark.timeout(120)
def test_postgresql_upgrade_sql_is_a_plain_add_column(tmp_path):
    with _database("postgresql", tmp_path) as url:
        env = harness.AirflowEnv(VENV, tmp_path / "home", db_url=url)
        out = env.airflow(
            "db",
            "migrate",
            "--show-sql-only",
            "--from-revision",
            DOWN_REVISION,
            "--to-revision",
            REVISION,
            timeout=180,
        ).stdout
    statements = [line.strip().rstrip(";") for line in out.splitlines() if "infra_retry_count" in line]
    assert statements == [
        f"ALTER TABLE {table} ADD COLUMN infra_retry_count INTEGER DEFAULT 0 NOT NULL" for table in TABLES
    ], out
    # No batch table copy, no data rewrite.
    assert "_alembic_tmp" not in out
    assert "INSERT INTO" not in out.upper()
    assert "UPDATE TASK_INSTANCE" not in out.upper()


@pytest.mark.requires_feature("retry-rules")
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.timeout(240)
def test_storm_guard_table_upgrade_and_downgrade_with_rows(backend, tmp_path):
    """The storm guard's table (retry-rules, after aip-122's migration): down with rows and up again."""
    from airflow.models.infra_retry_storm_guard import InfraRetryStormGuardState

    with _database(backend, tmp_path, migrated_by=VENV) as url:
        env = harness.AirflowEnv(VENV, tmp_path / "home", db_url=url)
        shutil.copy(HERE / "dags" / "aip122_mig_dag.py", env.dags_folder)
        env.airflow("dags", "test", "aip122_mig", timeout=180)
        head = _state(url)
        assert head["revision"] == _series_head()
        engine = sa.create_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(
                    InfraRetryStormGuardState.__table__.insert(),
                    [
                        {
                            "executor": "CeleryExecutor",
                            "queue": queue,
                            "failures": [1764900000.5, 1764900001.25],
                            "engaged": True,
                            "next_release_at": None,
                            "held": 2,
                            "updated_at": datetime.datetime.now(datetime.UTC),
                        }
                        for queue in ("default", "spot pool #1")
                    ],
                )

            env.airflow("db", "downgrade", "-r", REVISION, "-y", timeout=300)
            down = _state(url)
            assert down["revision"] == REVISION
            assert GUARD_TABLE not in sa.inspect(engine).get_table_names()
            assert down["rows"] == head["rows"]
            assert down["counts"] == head["counts"]

            env.airflow("db", "migrate", timeout=300)
            up = _state(url)
            assert up["revision"] == _series_head()
            assert up["rows"] == head["rows"]
            insp = sa.inspect(engine)
            model = InfraRetryStormGuardState.__table__
            columns = {c["name"]: c for c in insp.get_columns(GUARD_TABLE)}
            assert set(columns) == set(model.columns.keys())
            for column in model.columns:
                assert columns[column.name]["nullable"] == column.nullable, column.name
            assert insp.get_pk_constraint(GUARD_TABLE)["constrained_columns"] == ["executor", "queue"]
            with engine.connect() as conn:
                assert conn.execute(sa.text(f"SELECT count(*) FROM {GUARD_TABLE}")).scalar_one() == 0
        finally:
            engine.dispose()
