"""
End to end: a real patched-3.3.2 database upgraded to patched 3.4 with ``dev/upgrade_from_3_3.py``.

For SQLite and PostgreSQL: the 3.3 line's ``.venv`` runs api-server, dag-processor and a scheduler
(LocalExecutor, ``max_infra_retries=1``) over the Dags in ``dags/``: a try that loses its worker and
is granted an infrastructure retry, two tries that fail in the task's code, and asset events emitted
with idempotency keys. Then ``.venv-3.4`` runs the documented sequence -- ``prepare``, ``airflow db
migrate``, ``restore`` -- each step twice (re-runnable), and the test checks that nothing is lost:
every 3.3 task instance and history row is a ``task_instance`` row (history rows archived, same
UUID and coordinates), every asset event is there unchanged, every carried value is either in the
3.4 column of the same try or still in the holding table, and the asset idempotency keys likewise.
On SQLite it also checks that ``prepare`` leaves the schema the 3.3 migrations' own downgrades leave.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))

import harness  # noqa: E402
import lines  # noqa: E402

VENV33 = Path(sys.executable).parent.parent
#: The 3.4 line's venv this checkout's ``make install LINE=3.4`` builds (the module fixture runs it
#: when it is missing or stale); ``UPGRADE_VENV_34`` names another build of it, which the fixture
#: waits for (``.ci/run`` names the 3.4 line's clone's), and ``UPGRADE_VENV_34_ENDED`` a file that
#: exists once that other build's command has ended (``.ci/run``: its exit status).
OWN_VENV34 = REPO / ".venv-3.4"
SCRIPT = REPO / "dev" / "upgrade_from_3_3.py"
#: What ``pstool install`` writes into a venv once it is complete (``pstool.venv.STAMP``).
STAMP = ".patchset-stamp.json"
DAGS = ("upgrade_infra", "upgrade_app", "upgrade_emit")
CARRIED = {"failure_cause": None, "failure_reason": None, "infra_retry_count": 0}

pytestmark = [
    pytest.mark.skipif(
        lines.LINE != lines.DEFAULT_LINE,
        reason="builds the patched 3.3.2 database with the 3.3 line's venv: runs in the 3.3 line's session",
    ),
]


def _install_34_here() -> Path:
    """``pstool install`` of the 3.4 line in this checkout (quick when it is up to date)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PATCHSET_", "VIRTUAL_ENV", "UPGRADE_"))}
    env.update(PATCHSET_LINE="3.4", PYTHONPATH=str(REPO / "dev"))
    proc = subprocess.run(
        [sys.executable, "-m", "pstool", "install"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=1500, check=False,
    )
    assert proc.returncode == 0, f"installing the 3.4 line failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return OWN_VENV34


def _wait_for_other_build(venv: Path, ended: Path | None, timeout: float) -> bool:
    """Wait until the other build of the 3.4 venv is complete (True) or its command has ended without
    completing it (False: ``ended`` exists and the venv has no stamp); raise on ``timeout``."""

    def done() -> str | None:
        if (venv / STAMP).exists():
            return "installed"
        if ended is not None and ended.exists():
            return "ended"
        return None

    outcome = harness.wait_for(
        done, timeout=timeout, interval=5, what=f"the 3.4 line's install to finish ({venv / STAMP}, UPGRADE_VENV_34)"
    )
    # The stamp is written last, so it may land between the two looks: look once more.
    return outcome == "installed" or (venv / STAMP).exists()


@pytest.fixture(scope="module")
def venv34() -> Path:
    """The 3.4 line's patched venv: this session installs it itself (``pstool install`` of the 3.4 line,
    which fetches, checks out and builds what it needs, and is quick when it is up to date), so the
    3.3 line's ``make test`` never relies on another command having installed the 3.4 line first.

    With ``UPGRADE_VENV_34`` (CI: the 3.4 line's clone builds that venv from the same commit), it
    waits for that build instead; if that build's command ends without completing it (a failure the
    3.4 line's own result reports), it installs the 3.4 line here after all, so that the 3.3 line's
    upgrade tests neither wait out their timeout nor fail for another line's reason.
    """
    named = os.environ.get("UPGRADE_VENV_34")
    if not named:
        venv = _install_34_here()
    else:
        ended = os.environ.get("UPGRADE_VENV_34_ENDED")
        timeout = float(os.environ.get("UPGRADE_VENV_34_WAIT", "1800"))
        if _wait_for_other_build(Path(named), Path(ended) if ended else None, timeout):
            venv = Path(named)
        else:
            print(f"the build of {named} ended without completing it ({ended}); installing the 3.4 line here")
            venv = _install_34_here()
    assert harness.venv_python_ok(venv), f"no 3.4 venv at {venv}"
    return venv


def test_waiting_for_another_build_ends_when_its_command_ended_without_it(tmp_path: Path) -> None:
    """CI's 3.3 line waits for the 3.4 clone's venv; when that clone's command has ended without
    completing it, the wait ends at once (the fixture then installs the 3.4 line itself) rather than
    after its timeout (30 min: what a failed 3.4 install once cost the 3.3 line, both its upgrade
    tests failing for the 3.4 line's reason)."""
    venv, ended = tmp_path / "venv", tmp_path / "3.4.rc"
    venv.mkdir()
    with pytest.raises(TimeoutError, match="the 3.4 line's install to finish"):
        _wait_for_other_build(venv, ended, timeout=0)
    ended.write_text("2\n")
    assert _wait_for_other_build(venv, ended, timeout=600) is False
    (venv / STAMP).write_text("{}")
    assert _wait_for_other_build(venv, ended, timeout=600) is True
    assert _wait_for_other_build(venv, None, timeout=600) is True


def _database(backend: str, tmp_path: Path) -> contextlib.AbstractContextManager[str]:
    """A database at the 3.3 line's head (a copy of the template ``airflow db migrate`` made for .venv)."""
    return harness.backend_database(backend, tmp_path, "t_upgrade_33_34", migrated_by=VENV33)


def _rows(url: str, sql: str) -> list[dict[str, Any]]:
    return harness.query(url, sql)


def _norm_id(value: Any) -> str:
    """A UUID as PostgreSQL (hyphenated) or SQLite (32 hex digits) hands it back, in one form."""
    return str(uuid.UUID(str(value)))


def _make_patched_33_database(url: str, home: Path) -> None:
    """Run the Dags on the patched 3.3.2 stack until every run has finished."""
    with harness.Stack(
        "t_upgrade_33",
        home,
        venv=VENV33,
        db_url=url,
        dags=[HERE / "dags" / "upgrade_dags.py"],
        config={
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__MAX_INFRA_RETRIES": "1",
            "AIRFLOW__CORE__INFRA_RETRY_DELAY": "1",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "300",
        },
    ) as stack:
        for dag_id in DAGS:
            stack.trigger(dag_id)

        def finished() -> bool:
            runs = _rows(url, "SELECT dag_id, state FROM dag_run")
            return len(runs) == len(DAGS) and all(r["state"] in ("success", "failed") for r in runs)

        try:
            stack.wait_for(finished, timeout=240, interval=1, what="every Dag run finished")
        except TimeoutError:
            print(_rows(url, "SELECT dag_id, task_id, state, try_number FROM task_instance"))
            raise


def _snapshot_33(url: str) -> dict[str, Any]:
    cols = "dag_id, task_id, run_id, map_index, try_number, state, failure_cause, failure_reason, infra_retry_count"
    tis = _rows(url, f"SELECT id, {cols} FROM task_instance")
    history = _rows(url, f"SELECT task_instance_id AS id, {cols} FROM task_instance_history")
    for row in (*tis, *history):
        row["id"] = _norm_id(row["id"])
    return {
        "ti": tis,
        "history": history,
        "asset_event": _rows(url, "SELECT * FROM asset_event ORDER BY id"),
        "idempotency": _rows(
            url, "SELECT asset_id, idempotency_key, asset_event_id FROM asset_event_idempotency_key"
        ),
    }


def _script(step: str, url: str, home: Path, venv34: Path) -> subprocess.CompletedProcess:
    env = harness.AirflowEnv(venv34, home, db_url=url)
    proc = subprocess.run(
        [env.python, str(SCRIPT), step], env=env.env, capture_output=True, text=True, timeout=600, check=False
    )
    print(f"---- {step}\n{proc.stdout}\n{proc.stderr[-3000:]}")
    return proc


def _schema(url: str, tables: tuple[str, ...]) -> dict[str, Any]:
    engine = sa.create_engine(url)
    try:
        insp = sa.inspect(engine)
        return {
            t: {
                "columns": [(c["name"], str(c["type"]), c["nullable"]) for c in insp.get_columns(t)],
                "fks": sorted(
                    (
                        fk["name"] or "",
                        tuple(fk["constrained_columns"]),
                        fk["referred_table"],
                        json.dumps(fk["options"], sort_keys=True),
                    )
                    for fk in insp.get_foreign_keys(t)
                ),
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in insp.get_indexes(t)
                ),
                "unique": sorted(
                    (u["name"] or "", tuple(u["column_names"])) for u in insp.get_unique_constraints(t)
                ),
                "pk": insp.get_pk_constraint(t)["constrained_columns"],
            }
            for t in tables
        } | {"tables": sorted(t for t in insp.get_table_names() if not t.startswith("patchset_upgrade_"))}
    finally:
        engine.dispose()


@pytest.mark.e2e
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_patched_33_database_upgrades_to_34_without_loss(backend: str, tmp_path: Path, venv34: Path) -> None:
    with _database(backend, tmp_path) as url:
        _make_patched_33_database(url, tmp_path / "home33")
        before = _snapshot_33(url)

        # The stack produced what the upgrade has to carry.
        infra_granted = [
            r for r in before["ti"] if r["dag_id"] == "upgrade_infra" and r["infra_retry_count"] == 1
        ]
        assert len(infra_granted) == 1 and infra_granted[0]["state"] == "success", before["ti"]
        assert {(r["dag_id"], r["failure_cause"]) for r in before["history"]} >= {
            ("upgrade_infra", "infra"),
            ("upgrade_app", "application"),
        }, before["history"]
        assert any(r["failure_cause"] == "application" for r in before["ti"]), before["ti"]
        assert len(before["idempotency"]) == 2, before["idempotency"]
        carried = {
            (row["id"], column): row[column]
            for row in (*before["ti"], *before["history"])
            for column, empty in CARRIED.items()
            if row[column] is not None and row[column] != empty
        }

        if backend == "sqlite":
            # What our migrations' own downgrades leave (3.3 venv), to compare prepare's result with.
            reference = tmp_path / "reference.db"
            shutil.copy(tmp_path / "airflow.db", reference)
            harness.AirflowEnv(VENV33, tmp_path / "home-ref", db_url=f"sqlite:///{reference}").airflow(
                "db", "downgrade", "-r", "d2f4e1b3c5a7", "-y", timeout=300
            )

        home34 = tmp_path / "home34"
        first = _script("prepare", url, home34, venv34)
        assert first.returncode == 0, first.stderr
        assert "stamped d2f4e1b3c5a7" in first.stdout
        again = _script("prepare", url, home34, venv34)
        assert again.returncode == 0 and "already prepared" in again.stdout, again.stdout
        if backend == "sqlite":
            tables = ("task_instance", "task_instance_history", "asset_event")
            assert _schema(url, tables) == _schema(f"sqlite:///{reference}", tables)

        too_early = _script("restore", url, home34, venv34)
        assert too_early.returncode == 2 and "run `airflow db migrate`" in too_early.stderr

        harness.AirflowEnv(venv34, home34, db_url=url).airflow("db", "migrate", timeout=600)
        restored = _script("restore", url, home34, venv34)
        assert restored.returncode == 0, restored.stderr
        restored_again = _script("restore", url, home34, venv34)
        assert restored_again.returncode == 0, restored_again.stderr

        # No task instance or history row lost: each is a task_instance row with its UUID and coordinates.
        after = {_norm_id(r["id"]): r for r in _rows(url, "SELECT * FROM task_instance")}
        for row in before["ti"]:
            assert after[row["id"]]["working_set"] in (True, 1), row
        for row in before["history"]:
            assert (
                after[row["id"]]["working_set"] is None and after[row["id"]]["archived_reason"] == "legacy"
            ), row
        for row in (*before["ti"], *before["history"]):
            got = after[row["id"]]
            assert (got["dag_id"], got["task_id"], got["run_id"], got["region_index"], got["state"]) == (
                row["dag_id"],
                row["task_id"],
                row["run_id"],
                row["map_index"],
                row["state"],
            ), (row, got)
        assert len(after) == len(before["ti"]) + len(before["history"])

        # No asset event lost or changed.
        events = {r["id"]: r for r in _rows(url, "SELECT * FROM asset_event")}
        assert sorted(events) == [r["id"] for r in before["asset_event"]]
        # The emit chain (asset-emit's loop protection) is dropped, not carried (docs/upgrading.md).
        dropped = {"emit_chain", "emit_chain_stop_reason"}
        for row in before["asset_event"]:
            assert {k: events[row["id"]][k] for k in row if k not in dropped} == {
                k: v for k, v in row.items() if k not in dropped
            }
            assert all(events[row["id"]].get(k) is None for k in dropped), events[row["id"]]

        # Each carried value is in the 3.4 column of the same try, or still in the holding table.
        engine = sa.create_engine(url)
        insp = sa.inspect(engine)
        engine.dispose()
        ti_columns = {c["name"] for c in insp.get_columns("task_instance")}
        held = {}
        if insp.has_table("patchset_upgrade_ti_value"):
            held = {
                (_norm_id(r["try_id"]), r["column_name"]): r["value"]
                for r in _rows(url, "SELECT try_id, column_name, value FROM patchset_upgrade_ti_value")
            }
        for (try_id, column), value in carried.items():
            if column in ti_columns:
                assert after[try_id][column] == value, (try_id, column)
                assert (try_id, column) not in held
            else:
                assert held[(try_id, column)] == str(value), (try_id, column)
        assert set(held) <= set(carried)

        # The asset idempotency keys: in 3.4's table when it has one, else held.
        keys = {(r["asset_id"], r["idempotency_key"], r["asset_event_id"]) for r in before["idempotency"]}
        if insp.has_table("asset_event_idempotency_key"):
            got_keys = _rows(
                url, "SELECT asset_id, idempotency_key, asset_event_id FROM asset_event_idempotency_key"
            )
        else:
            got_keys = _rows(
                url,
                "SELECT asset_id, idempotency_key, asset_event_id FROM patchset_upgrade_asset_event_idempotency_key",
            )
        assert {(r["asset_id"], r["idempotency_key"], r["asset_event_id"]) for r in got_keys} == keys

        # The whole sequence again on the upgraded database changes nothing.
        rerun = _script("run", url, home34, venv34)
        assert rerun.returncode == 0, rerun.stderr
        assert {_norm_id(r["id"]) for r in _rows(url, "SELECT id FROM task_instance")} == set(after)
