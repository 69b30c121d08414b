"""The asset_event_idempotency_key migration: downgrade removes the table, upgrade restores it."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import uuid

import pytest

from conftest import AIRFLOW, PG_ADMIN_URL, TEST_ENV, _psql

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

# The migration and the head it revises, per release line of the installed core (3.3: 0124 after
# 3.3.0's head; 3.4: 0148 after 3.4.0b2's head, with its own revision id).
_REVISIONS = {"3.3": ("7c3a9e5b1f42", "d2f4e1b3c5a7"), "3.4": ("e1a4c7b92d35", "9cffe90fa0c0")}
_LINE = ".".join(importlib.metadata.version("apache-airflow-core").split(".")[:2])
REVISION, PREVIOUS = _REVISIONS[_LINE]


def _tables(url: str) -> set[str]:
    import psycopg2

    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("select tablename from pg_tables where schemaname = 'public'")
            tables = {row[0] for row in cur.fetchall()}
            cur.execute("select version_num from alembic_version")
            tables.add("@" + cur.fetchone()[0])
            return tables
    finally:
        conn.close()


def test_migration_downgrade_and_upgrade():
    name = f"t_emit_mig_{uuid.uuid4().hex[:8]}"
    url = f"postgresql+psycopg2://postgres:postgres@127.0.0.1:5432/{name}"
    raw = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    env = {**os.environ, **TEST_ENV, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url}
    _psql(f'CREATE DATABASE "{name}"')
    try:

        def run(*args: str) -> None:
            subprocess.run([AIRFLOW, "db", *args], env=env, check=True, capture_output=True, timeout=200)

        # Later features chain their migrations after this one: pin the revision under test.
        run("migrate", "--to-revision", REVISION)
        assert {"asset_event_idempotency_key", f"@{REVISION}"} <= _tables(raw)
        run("downgrade", "-r", PREVIOUS, "-y")
        after_down = _tables(raw)
        assert "asset_event_idempotency_key" not in after_down and f"@{PREVIOUS}" in after_down
        run("migrate", "--to-revision", REVISION)
        assert {"asset_event_idempotency_key", f"@{REVISION}"} <= _tables(raw)
        run("migrate")  # and on to the head of the whole series
        assert "asset_event_idempotency_key" in _tables(raw)
        import psycopg2

        conn = psycopg2.connect(raw)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "select pg_get_constraintdef(oid) from pg_constraint "
                    "where conname = 'asset_event_idempotency_key_pkey'"
                )
                assert cur.fetchone()[0] == "PRIMARY KEY (asset_id, idempotency_key)"
        finally:
            conn.close()
    finally:
        _psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
