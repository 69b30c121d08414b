"""Migration 0125 (AIP-97) on a real Airflow 3.3.2 database that holds task instances.

The database is created and filled by the *unpatched* 3.3.2 venv (``airflow db migrate`` and
``airflow dags test`` of a Dag whose second task fails once and is retried, so both task_instance
and task_instance_history hold rows). The patched venv then upgrades it and downgrades it again.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import harness
import pytest
import sqlalchemy as sa

FIXTURES = Path(__file__).resolve().parent / "fixtures"

REVISION = "5c1e97a4f0b3"
DOWN_REVISION = "d2f4e1b3c5a7"
TABLES = ("task_instance", "task_instance_history")
ROW_COLUMNS = (
    "dag_id",
    "task_id",
    "run_id",
    "map_index",
    "try_number",
    "state",
    "max_tries",
    "operator",
)


def _database(backend: str, tmp_path: Path) -> contextlib.AbstractContextManager[str]:
    return harness.backend_database(backend, tmp_path, "t_aip97core_mig")

def _snapshot(url: str) -> dict:
    engine = sa.create_engine(url)
    try:
        insp = sa.inspect(engine)
        out: dict = {"columns": {}, "rows": {}}
        with engine.connect() as conn:
            out["revision"] = conn.execute(
                sa.text("SELECT version_num FROM alembic_version")
            ).scalar_one()
            for table in TABLES:
                out["columns"][table] = {c["name"]: c for c in insp.get_columns(table)}
                cols = ", ".join(ROW_COLUMNS)
                out["rows"][table] = sorted(
                    tuple(r)
                    for r in conn.execute(sa.text(f"SELECT {cols} FROM {table}")).all()
                )
                if "failure_cause" in out["columns"][table]:
                    out.setdefault("new_values", {})[table] = conn.execute(
                        sa.text(f"SELECT failure_cause, failure_reason FROM {table}")
                    ).all()
        return out
    finally:
        engine.dispose()


@pytest.mark.e2e
@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_upgrade_then_downgrade_real_332_database(
    backend, tmp_path, patched_venv, unpatched_venv
):
    home = tmp_path / "home"
    with _database(backend, tmp_path) as url:
        old = harness.AirflowEnv(unpatched_venv, home, db_url=url)
        shutil.copy(FIXTURES / "dags" / "aip97_mig_dag.py", old.dags_folder)
        old.airflow("db", "migrate")
        # The Dag run fails on purpose (flaky fails twice); what matters is the rows it leaves.
        old.airflow("dags", "test", "aip97_mig", check=False)
        before = _snapshot(url)
        assert before["revision"] == DOWN_REVISION
        assert len(before["rows"]["task_instance"]) == 2
        assert len(before["rows"]["task_instance_history"]) >= 1, (
            "3.3.2 should have archived the failed try"
        )
        for table in TABLES:
            assert "failure_cause" not in before["columns"][table]

        new = harness.AirflowEnv(patched_venv, home, db_url=url)
        # Later features (AIP-122) chain their migrations after this one: stop at the one under test.
        new.airflow("db", "migrate", "--to-revision", REVISION)
        upgraded = _snapshot(url)
        assert upgraded["revision"] == REVISION
        for table in TABLES:
            cols = upgraded["columns"][table]
            assert (
                cols["failure_cause"]["nullable"] and cols["failure_reason"]["nullable"]
            )
            assert getattr(cols["failure_cause"]["type"], "length", None) == 20
            assert getattr(cols["failure_reason"]["type"], "length", None) == 1000
            assert upgraded["rows"][table] == before["rows"][table]
            assert all(v == (None, None) for v in upgraded["new_values"][table])

        new.airflow("db", "downgrade", "--to-revision", DOWN_REVISION, "-y")
        downgraded = _snapshot(url)
        assert downgraded["revision"] == DOWN_REVISION
        for table in TABLES:
            assert "failure_cause" not in downgraded["columns"][table]
            assert "failure_reason" not in downgraded["columns"][table]
            # SQLite rebuilds task_instance on drop_column; the history rows must survive it.
            assert downgraded["rows"][table] == before["rows"][table]
        # The unpatched 3.3.2 accepts the downgraded database again.
        old.airflow("db", "check-migrations", "-t", "5")
