"""The asset_event_idempotency_key migration: downgrade removes the table, upgrade restores it."""

from __future__ import annotations

import importlib.metadata
import sys

import harness
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

# The migration and the head it revises, per release line of the installed core (3.3: 0124 after
# 3.3.0's head; 3.4: 0148 after 3.4.0b2's head, with its own revision id).
_REVISIONS = {"3.3": ("7c3a9e5b1f42", "d2f4e1b3c5a7"), "3.4": ("e1a4c7b92d35", "9cffe90fa0c0")}
_LINE = ".".join(importlib.metadata.version("apache-airflow-core").split(".")[:2])
REVISION, PREVIOUS = _REVISIONS[_LINE]


def _tables(url: str) -> set[str]:
    tables = {
        r["tablename"]
        for r in harness.query(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    }
    (version,) = harness.query(url, "SELECT version_num FROM alembic_version")
    return tables | {"@" + version["version_num"]}


def test_migration_downgrade_and_upgrade(tmp_path):
    # From an empty database: the migrations up to this one are what is tested, no template.
    with harness.backend_database("postgresql", tmp_path, "t_emit_mig") as url:
        env = harness.AirflowEnv(sys.prefix, tmp_path / "home", db_url=url)

        def run(*args: str) -> None:
            env.airflow("db", *args, timeout=200)

        # Later features chain their migrations after this one: pin the revision under test.
        run("migrate", "--to-revision", REVISION)
        assert {"asset_event_idempotency_key", f"@{REVISION}"} <= _tables(url)
        run("downgrade", "-r", PREVIOUS, "-y")
        after_down = _tables(url)
        assert "asset_event_idempotency_key" not in after_down and f"@{PREVIOUS}" in after_down
        run("migrate", "--to-revision", REVISION)
        assert {"asset_event_idempotency_key", f"@{REVISION}"} <= _tables(url)
        run("migrate")  # and on to the head of the whole series
        assert "asset_event_idempotency_key" in _tables(url)
        (pkey,) = harness.query(
            url,
            "SELECT pg_get_constraintdef(oid) AS d FROM pg_constraint WHERE conname = 'asset_event_idempotency_key_pkey'",
        )
        assert pkey["d"] == "PRIMARY KEY (asset_id, idempotency_key)"
