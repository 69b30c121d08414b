"""The AIP-97 migration on a real database of the line's release that holds task instances.

The database is created and filled by the *unpatched* Airflow of the line (3.3.2, or 3.4.0b2 on the
3.4 line: ``airflow db migrate`` and ``airflow dags test`` of a Dag whose second task fails once and
is retried, so there are a live try and an archived one). The patched venv then upgrades it to the
AIP-97 revision and downgrades it again to the unpatched head, which the unpatched Airflow accepts.

The 3.3 line's migration is 0125 (``5c1e97a4f0b3``), on ``task_instance`` and
``task_instance_history``. 3.4 has no ``task_instance_history``: its migration (``cf95d8194a28``,
after asset-emit's ``e1a4c7b92d35``) touches ``task_instance`` only, where the archived tries are
rows with ``working_set IS NULL``, and the stored map index column is ``region_index``.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import harness
import lines
import pytest
import sqlalchemy as sa

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# The AIP-97 revision and the unpatched release's head it is built on (the DB the unpatched venv
# makes), per line.
REVISION, DOWN_REVISION = {
    "3.3": ("5c1e97a4f0b3", "d2f4e1b3c5a7"),
    "3.4": ("cf95d8194a28", "9cffe90fa0c0"),
}[lines.LINE]
if lines.LINE == lines.DEFAULT_LINE:
    TABLES = ("task_instance", "task_instance_history")
    ROW_COLUMNS = ("dag_id", "task_id", "run_id", "map_index", "try_number", "state", "max_tries", "operator")
    LIVE_TRIES = "task_instance"
else:
    # 3.4: every try is a task_instance row (working_set TRUE live, NULL archived); map_index is
    # stored as region_index.
    TABLES = ("task_instance",)
    ROW_COLUMNS = (
        "dag_id", "task_id", "run_id", "region_index", "try_number", "state", "max_tries", "operator",
        "working_set", "archived_reason",
    )  # fmt: skip
    LIVE_TRIES = "(SELECT * FROM task_instance WHERE working_set IS TRUE) AS live"


def _database(backend: str, tmp_path: Path, migrated_by: Path) -> contextlib.AbstractContextManager[str]:
    """A database at the head of ``migrated_by``'s migrations (a copy of its template)."""
    return harness.backend_database(backend, tmp_path, "t_aip97core_mig", migrated_by=migrated_by)

def _snapshot(url: str) -> dict:
    engine = sa.create_engine(url)
    try:
        insp = sa.inspect(engine)
        out: dict = {"columns": {}, "rows": {}}
        with engine.connect() as conn:
            out["revision"] = conn.execute(
                sa.text("SELECT version_num FROM alembic_version")
            ).scalar_one()
            out["live"] = conn.execute(sa.text(f"SELECT count(*) FROM {LIVE_TRIES}")).scalar_one()
            out["past"] = conn.execute(sa.text(f"SELECT count(*) FROM {lines.PAST_TRIES}")).scalar_one()
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
def test_upgrade_then_downgrade_real_unpatched_database(
    backend, tmp_path, patched_venv, unpatched_venv
):
    home = tmp_path / "home"
    # What the unpatched Airflow's `airflow db migrate` makes (once per venv build: its template).
    with _database(backend, tmp_path, unpatched_venv) as url:
        old = harness.AirflowEnv(unpatched_venv, home, db_url=url)
        shutil.copy(FIXTURES / "dags" / "aip97_mig_dag.py", old.dags_folder)
        # The Dag run fails on purpose (flaky fails twice); what matters is the rows it leaves.
        old.airflow("dags", "test", "aip97_mig", check=False)
        before = _snapshot(url)
        assert before["revision"] == DOWN_REVISION
        assert before["live"] == 2
        assert before["past"] >= 1, "the unpatched Airflow should have archived the failed try"
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
            # SQLite rebuilds task_instance on drop_column; the history rows (3.4: the archived
            # task_instance rows) must survive it.
            assert downgraded["rows"][table] == before["rows"][table]
        assert (downgraded["live"], downgraded["past"]) == (before["live"], before["past"])
        # The unpatched Airflow accepts the downgraded database again.
        old.airflow("db", "check-migrations", "-t", "5")
