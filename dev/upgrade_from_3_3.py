# Licensed to the Apache Software Foundation (ASF) under one
# or more contributor license agreements.  See the NOTICE file
# distributed with this work for additional information
# regarding copyright ownership.  The ASF licenses this file
# to you under the Apache License, Version 2.0 (the
# "License"); you may not use this file except in compliance
# with the License.  You may obtain a copy of the License at
#
#   http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an
# "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
# KIND, either express or implied.  See the License for the
# specific language governing permissions and limitations
# under the License.
"""
Upgrade a patched Airflow 3.3.2 metadata database to patched Airflow 3.4, carrying the patch set's data.

Run it with the **3.4** interpreter (``.venv-3.4/bin/python``), against the database ``airflow db
migrate`` would use (Airflow's ``[database] sql_alchemy_conn``, or ``--conn URL``)::

    python upgrade_from_3_3.py prepare   # carry our data aside, undo our 3.3 migrations, stamp 3.3.2's head
    airflow db migrate                   # 3.4's own chain (and the 3.4 line's patch migrations)
    python upgrade_from_3_3.py restore   # put each carried value where 3.4's schema holds it
    python upgrade_from_3_3.py run       # the three steps above, in order
    python upgrade_from_3_3.py status    # what the database is at, and what is still carried

Why: our 3.3 migrations (asset-emit ``7c3a9e5b1f42`` and ``a3f9c2e7b5d1``, aip-97 ``5c1e97a4f0b3``, aip-122 ``704a18c1acc7``,
retry-rules ``3b8d6f2a9c41``, oom ``9c3e5a7f1d24``) follow 3.3.2's head ``d2f4e1b3c5a7``, as 3.4's own chain does, so 3.4's Alembic cannot start from our
head; and 3.4 folds ``task_instance_history`` into ``task_instance`` rows (migration 0142), which would
drop our history columns. ``prepare`` copies what the patch set added into ``patchset_upgrade_*``
tables keyed by each try's UUID (0142 keeps a history row's ``task_instance_id`` as the archived
``task_instance.id``; 0138's UUID rotation archives the old UUID, so the UUID still names the try),
then drops our columns and table exactly as our migrations' downgrades do, and stamps ``d2f4e1b3c5a7``.
``restore`` fills each carried value into the row with that UUID when 3.4's ``task_instance`` has the
column and the row's value is still empty (it never overwrites what 3.4 recorded), copies the asset
idempotency keys when 3.4 has their table, and leaves everything else in the holding tables, reported.
Every step runs in one transaction (on SQLite too) and can be re-run; an unknown database is refused.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

#: 3.3.2's migration head, which 3.4's chain continues from.
BASE_REVISION = "d2f4e1b3c5a7"

#: Holding tables (never prefixed ``_airflow_moved``: Airflow reports those as its own moved data).
STATE_TABLE = "patchset_upgrade_state"
VALUE_TABLE = "patchset_upgrade_ti_value"
TABLE_PREFIX = "patchset_upgrade_"

TRY_TABLES = ("task_instance", "task_instance_history")
BATCH = 500


@dataclass(frozen=True)
class Migration:
    """One of our 3.3 migrations: what it adds, and so what ``prepare`` carries and drops."""

    feature: str
    revision: str
    #: Columns added to both task_instance and task_instance_history, with their empty value.
    try_columns: dict[str, Any] = field(default_factory=dict)
    #: Tables created, with the indexes the downgrade drops first.
    tables: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Columns added to other existing tables: {table: columns in the order the upgrade adds them}.
    #: Dropped, not carried (see the asset-emit chain entry below).
    columns: dict[str, tuple[str, ...]] = field(default_factory=dict)


#: In chain order (the full series: asset-emit, then aip-97, aip-122, retry-rules, oom); ``prepare`` undoes them backwards.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "asset-emit",
        "7c3a9e5b1f42",
        tables={"asset_event_idempotency_key": ("idx_asset_event_idempotency_key_event_id",)},
    ),
    # asset-emit's second migration (loop protection). The chains are dropped, not carried: they only
    # bound loops in flight, which start over at depth 1 after the upgrade.
    Migration(
        "asset-emit-chain",
        "a3f9c2e7b5d1",
        columns={"asset_event": ("emit_chain", "emit_chain_stop_reason")},
    ),
    Migration("aip-97", "5c1e97a4f0b3", try_columns={"failure_cause": None, "failure_reason": None}),
    Migration("aip-122", "704a18c1acc7", try_columns={"infra_retry_count": 0}),
    # The storm guard's shared state: carried and restored like the idempotency keys (it is transient:
    # its failure times leave the window within a minute, so an empty table after the upgrade is as good).
    Migration("retry-rules", "3b8d6f2a9c41", tables={"infra_retry_storm_guard": ()}),
    # The memory escalation a try ran with, a JSON value per try.
    Migration("oom", "9c3e5a7f1d24", try_columns={"memory_escalation": None}),
)
BY_FEATURE = {m.feature: m for m in MIGRATIONS}
EMPTY: dict[str, Any] = {c: e for m in MIGRATIONS for c, e in m.try_columns.items()}

#: The heads a patched 3.3.2 database can be at, and the features each one implies / allows.
HEADS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "9c3e5a7f1d24": (frozenset({"aip-97", "aip-122", "retry-rules", "oom"}), frozenset({"asset-emit", "asset-emit-chain"})),
    "3b8d6f2a9c41": (frozenset({"aip-97", "aip-122", "retry-rules"}), frozenset({"asset-emit", "asset-emit-chain"})),
    "704a18c1acc7": (frozenset({"aip-97", "aip-122"}), frozenset({"asset-emit", "asset-emit-chain"})),
    "5c1e97a4f0b3": (frozenset({"aip-97"}), frozenset({"asset-emit", "asset-emit-chain"})),
    "a3f9c2e7b5d1": (frozenset({"asset-emit", "asset-emit-chain"}), frozenset()),
    # A database of the series before asset-emit's loop protection.
    "7c3a9e5b1f42": (frozenset({"asset-emit"}), frozenset()),
}


class Refused(Exception):
    """The database is not one this script knows how to handle; nothing was changed."""


# --------------------------------------------------------------------------------------------- engine


def make_engine(url: str) -> Engine:
    """An engine whose transactions cover DDL on SQLite as well (pysqlite's default does not)."""
    if not url.startswith("sqlite"):
        return sa.create_engine(url)
    engine = sa.create_engine(url)

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        # A task_instance rebuild must not cascade into the rows that reference it.
        dbapi_connection.execute("PRAGMA foreign_keys=OFF")

    @sa.event.listens_for(engine, "begin")
    def _begin(conn):  # type: ignore[no-untyped-def]
        conn.exec_driver_sql("BEGIN")

    return engine


def airflow_conn() -> str:
    """The database ``airflow db migrate`` uses: Airflow's own configuration (env, file, _cmd, secrets)."""
    from airflow.configuration import conf

    return conf.get("database", "sql_alchemy_conn")


def installed_script():  # type: ignore[no-untyped-def]
    """The installed Airflow's Alembic revisions."""
    from airflow.utils.db import _get_alembic_config
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_get_alembic_config())


# ---------------------------------------------------------------------------------------- inspection


def _revision(conn: Connection) -> str | None:
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    rows = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(rows) != 1:
        raise Refused(f"alembic_version holds {len(rows)} revisions {rows}; expected one")
    return rows[0]


def _columns(conn: Connection, table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(conn).get_columns(table)}


def present_features(conn: Connection) -> set[str]:
    """Which of our 3.3 migrations the schema shows as applied (refusing half-applied ones)."""
    insp = sa.inspect(conn)
    found = set()
    for m in MIGRATIONS:
        marks = []
        for column in m.try_columns:
            marks += [column in _columns(conn, t) for t in TRY_TABLES]
        marks += [insp.has_table(t) for t in m.tables]
        marks += [insp.has_table(t) and c in _columns(conn, t) for t, cols in m.columns.items() for c in cols]
        if all(marks):
            found.add(m.feature)
        elif any(marks):
            raise Refused(f"{m.feature}'s migration {m.revision} is only partly present in this schema")
    return found


def _holding_tables(conn: Connection) -> list[str]:
    return sorted(t for t in sa.inspect(conn).get_table_names() if t.startswith(TABLE_PREFIX))


def _state(conn: Connection) -> dict[str, str]:
    if not sa.inspect(conn).has_table(STATE_TABLE):
        return {}
    return dict(conn.execute(sa.text(f"SELECT name, value FROM {STATE_TABLE}")).all())


# ------------------------------------------------------------------------------------------- prepare


def _metadata(conn: Connection) -> tuple[sa.Table, sa.Table]:
    md = sa.MetaData()
    state = sa.Table(
        STATE_TABLE,
        md,
        sa.Column("name", sa.String(50), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    values = sa.Table(
        VALUE_TABLE,
        md,
        # The try's UUID as the database renders it as text (0142 keeps it as the row's id).
        sa.Column("try_id", sa.String(36), primary_key=True),
        sa.Column("column_name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        # Where it came from, for people reading the table (and the report).
        sa.Column("origin", sa.String(30), nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("task_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("map_index", sa.Integer, nullable=False),
        sa.Column("try_number", sa.Integer),
        sa.Column("state", sa.String(20)),
    )
    md.create_all(conn, checkfirst=True)
    return state, values


def _holding_copy(conn: Connection, table: str) -> sa.Table:
    """A holding table with ``table``'s columns and primary key (no foreign keys: rows outlive 0142)."""
    source = sa.Table(table, sa.MetaData(), autoload_with=conn)
    pk = {c.name for c in source.primary_key.columns}
    holding = sa.Table(
        TABLE_PREFIX + table,
        sa.MetaData(),
        *(sa.Column(c.name, c.type, primary_key=c.name in pk, nullable=c.nullable) for c in source.columns),
    )
    holding.create(conn, checkfirst=True)
    return holding


def _carry_try_columns(conn: Connection, values: sa.Table, columns: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for table in TRY_TABLES:
        t = sa.Table(table, sa.MetaData(), autoload_with=conn)
        id_col = t.c.id if table == "task_instance" else t.c.task_instance_id
        for column in columns:
            empty = EMPTY[column]
            nonempty = t.c[column].is_not(None) if empty is None else t.c[column] != empty
            select = sa.select(
                sa.cast(id_col, sa.String(36)),
                sa.literal(column),
                sa.cast(t.c[column], sa.Text),
                sa.literal(table),
                t.c.dag_id,
                t.c.task_id,
                t.c.run_id,
                t.c.map_index,
                t.c.try_number,
                t.c.state,
            ).where(nonempty)
            result = conn.execute(
                values.insert().from_select(
                    [
                        "try_id",
                        "column_name",
                        "value",
                        "origin",
                        "dag_id",
                        "task_id",
                        "run_id",
                        "map_index",
                        "try_number",
                        "state",
                    ],
                    select,
                )
            )
            counts[f"{table}.{column}"] = result.rowcount
    return counts


def _drop(conn: Connection, migration: Migration) -> None:
    """What ``migration``'s downgrade does (same operations, same order)."""
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    op = Operations(MigrationContext.configure(conn))
    for table in TRY_TABLES:
        if migration.try_columns:
            with op.batch_alter_table(table, schema=None) as batch_op:
                for column in reversed(list(migration.try_columns)):
                    batch_op.drop_column(column)
    for table, columns in migration.columns.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            for column in reversed(columns):
                batch_op.drop_column(column)
    for table, indexes in migration.tables.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            for index in indexes:
                batch_op.drop_index(index)
        op.drop_table(table)


def prepare(engine: Engine, out=print) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Step 1: carry our data into holding tables, undo our 3.3 migrations, stamp 3.3.2's head."""
    with engine.begin() as conn:
        revision = _revision(conn)
        insp = sa.inspect(conn)
        if revision is None:
            raise Refused("no alembic_version table: not an Airflow metadata database")
        if not insp.has_table("task_instance_history"):
            script = installed_script()
            if revision == script.get_current_head():
                out(f"database is at this Airflow's head {revision}: already past 3.3, nothing to prepare")
                return {"action": "none", "revision": revision}
            raise Refused(
                f"database at revision {revision} has no task_instance_history, so it is not a 3.3 "
                "database, and it is not at this Airflow's head either"
            )
        features = present_features(conn)
        if revision == BASE_REVISION:
            if features:
                raise Refused(
                    f"database is stamped {BASE_REVISION} (3.3.2) but still has {sorted(features)}'s schema"
                )
            state = _state(conn)
            if state:
                out(
                    f"already prepared (from {state['source_revision']}); run `airflow db migrate`, then restore"
                )
                return {"action": "none", "revision": revision, "state": state}
            out("pristine 3.3.2 database: nothing to carry; run `airflow db migrate`")
            return {"action": "none", "revision": revision}
        if revision not in HEADS:
            raise Refused(
                f"database is at revision {revision}, which is neither 3.3.2's head {BASE_REVISION} nor a "
                f"head of the patched 3.3 series {sorted(HEADS)}"
            )
        required, allowed = HEADS[revision]
        if not required <= features <= required | allowed:
            raise Refused(
                f"revision {revision} means features {sorted(required)} (optionally {sorted(allowed)}), "
                f"but the schema has {sorted(features)}"
            )
        state, values = _metadata(conn)
        columns = [c for m in MIGRATIONS if m.feature in features for c in m.try_columns]
        counts = _carry_try_columns(conn, values, columns)
        for m in MIGRATIONS:
            if m.feature in features:
                for table in m.tables:
                    holding = _holding_copy(conn, table)
                    source = sa.Table(table, sa.MetaData(), autoload_with=conn)
                    result = conn.execute(
                        holding.insert().from_select(list(source.c.keys()), sa.select(source))
                    )
                    counts[table] = result.rowcount
        for m in reversed(MIGRATIONS):
            if m.feature in features:
                _drop(conn, m)
        conn.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": BASE_REVISION})
        now = datetime.datetime.now(datetime.UTC).isoformat()
        conn.execute(
            state.insert(),
            [
                {"name": "source_revision", "value": revision},
                {"name": "features", "value": ",".join(sorted(features))},
                {"name": "prepared_at", "value": now},
                {"name": "prepare_counts", "value": json.dumps(counts, sort_keys=True)},
            ],
        )
    for what, n in counts.items():
        out(f"carried {n:6d} {what}")
    out(f"undid {sorted(features)}; stamped {BASE_REVISION}. Next: `airflow db migrate` (3.4), then restore")
    return {"action": "prepared", "revision": revision, "features": sorted(features), "counts": counts}


# ------------------------------------------------------------------------------------------- restore


def _chunks(rows: Sequence[Any], size: int = BATCH) -> Iterator[Sequence[Any]]:
    for i in range(0, len(rows), size):
        yield rows[i : i + size]


def _to_python(column: sa.Column, text: str) -> Any:
    if isinstance(column.type, sa.JSON):  # memory_escalation: carried as its JSON text
        return json.loads(text)
    try:
        kind = column.type.python_type
    except NotImplementedError:
        return text
    return int(text) if kind is int else text


def _restore_try_values(conn: Connection, values: sa.Table) -> dict[str, dict[str, int]]:
    ti = sa.Table("task_instance", sa.MetaData(), autoload_with=conn)
    id_is_uuid = isinstance(ti.c.id.type, sa.Uuid) and ti.c.id.type.as_uuid
    report: dict[str, dict[str, int]] = {}
    for column in conn.execute(sa.select(values.c.column_name).distinct()).scalars().all():
        rows = conn.execute(
            sa.select(values.c.try_id, values.c.value).where(values.c.column_name == column)
        ).all()
        tally = {"restored": 0, "already": 0, "no_column": 0, "no_row": 0, "conflict": 0}
        report[column] = tally
        if column not in ti.c:
            tally["no_column"] = len(rows)
            continue
        target = ti.c[column]
        empty = EMPTY.get(column)
        for chunk in _chunks(rows):
            key = {r.try_id: (uuid.UUID(r.try_id) if id_is_uuid else r.try_id) for r in chunk}
            current = {
                str(row_id): value
                for row_id, value in conn.execute(
                    sa.select(ti.c.id, target).where(ti.c.id.in_(list(key.values())))
                )
            }
            updates, done = [], []
            for r in chunk:
                carried = _to_python(target, r.value)
                if r.try_id not in current:
                    tally["no_row"] += 1
                elif current[r.try_id] == carried:
                    tally["already"] += 1
                    done.append(r.try_id)
                elif current[r.try_id] is None or current[r.try_id] == empty:
                    updates.append({"b_id": key[r.try_id], "b_value": carried})
                    done.append(r.try_id)
                    tally["restored"] += 1
                else:
                    tally["conflict"] += 1
            if updates:
                conn.execute(
                    ti.update()
                    .where(ti.c.id == sa.bindparam("b_id"))
                    .values({column: sa.bindparam("b_value")}),
                    updates,
                )
            if done:
                conn.execute(values.delete().where(values.c.column_name == column, values.c.try_id.in_(done)))
    return report


def _restore_table(conn: Connection, table: str) -> dict[str, int]:
    holding = sa.Table(TABLE_PREFIX + table, sa.MetaData(), autoload_with=conn)
    rows = conn.execute(sa.select(holding)).mappings().all()
    tally = {"restored": 0, "already": 0, "no_table": 0, "conflict": 0, "no_parent": 0}
    if not sa.inspect(conn).has_table(table):
        tally["no_table"] = len(rows)
        return tally
    target = sa.Table(table, sa.MetaData(), autoload_with=conn)
    missing = [
        c.name
        for c in target.columns
        if c.name not in holding.c and not c.nullable and c.server_default is None and not c.autoincrement
    ]
    if missing:
        tally["no_table"] = len(rows)  # 3.4's table needs what 3.3 did not record
        return tally
    pk = [c.name for c in target.primary_key.columns]
    common = [c.name for c in holding.columns if c.name in target.c]
    parents = [
        (fk.parent.name, fk.column.table.name, fk.column.name)
        for fk in target.foreign_keys
        if fk.parent.name in common
    ]
    for row in rows:
        where = [target.c[k] == row[k] for k in pk]
        existing = conn.execute(sa.select(target).where(*where)).mappings().first()
        if existing is not None:
            same = all(existing[c] == row[c] for c in common if c not in ("created_at",))
            tally["already" if same else "conflict"] += 1
            if same:
                conn.execute(holding.delete().where(*(holding.c[k] == row[k] for k in pk)))
            continue
        orphan = False
        for column, parent, parent_column in parents:
            if row[column] is None:
                continue
            parent_t = sa.table(parent, sa.column(parent_column))
            if conn.execute(sa.select(1).where(parent_t.c[parent_column] == row[column])).first() is None:
                orphan = True
        if orphan:
            tally["no_parent"] += 1
            continue
        conn.execute(target.insert().values({c: row[c] for c in common}))
        conn.execute(holding.delete().where(*(holding.c[k] == row[k] for k in pk)))
        tally["restored"] += 1
    return tally


def restore(engine: Engine, out=print) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Step 3: put each carried value where 3.4's schema can hold it; keep the rest, reported."""
    with engine.begin() as conn:
        revision = _revision(conn)
        insp = sa.inspect(conn)
        state = _state(conn)
        if not state:
            if _holding_tables(conn):
                raise Refused(
                    f"holding tables {_holding_tables(conn)} without {STATE_TABLE}: not ours to touch"
                )
            out(
                "nothing carried (no prepare ran on this database, or everything was restored): nothing to do"
            )
            return {"action": "none"}
        head = installed_script().get_current_head()
        if insp.has_table("task_instance_history") or revision != head:
            raise Refused(
                f"database is at {revision}, not at this Airflow's head {head}: run `airflow db migrate` with "
                "the 3.4 installation first"
            )
        report: dict[str, Any] = {}
        if insp.has_table(VALUE_TABLE):
            _, values = _metadata(conn)
            report.update(_restore_try_values(conn, values))
        for m in MIGRATIONS:
            for table in m.tables:
                if insp.has_table(TABLE_PREFIX + table):
                    report[table] = _restore_table(conn, table)
        remaining = {}
        for t in _holding_tables(conn):
            if t != STATE_TABLE:
                remaining[t] = conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()
        if not any(remaining.values()):
            for t in [*remaining, STATE_TABLE]:
                conn.execute(sa.text(f"DROP TABLE {t}"))
        else:
            now = datetime.datetime.now(datetime.UTC).isoformat()
            conn.execute(
                sa.text(f"DELETE FROM {STATE_TABLE} WHERE name IN ('restored_at', 'restore_report')")
            )
            conn.execute(
                sa.text(
                    f"INSERT INTO {STATE_TABLE} (name, value) VALUES ('restored_at', :n), ('restore_report', :r)"
                ),
                {"n": now, "r": json.dumps(report, sort_keys=True)},
            )
    for what, tally in report.items():
        out(f"{what}: " + (", ".join(f"{k} {v}" for k, v in tally.items() if v) or "nothing carried"))
    if any(remaining.values()):
        out(
            "kept for a later restore (3.4 cannot hold them yet): "
            + ", ".join(f"{t} {n}" for t, n in remaining.items() if n)
        )
    else:
        out("everything carried is restored; the holding tables are dropped")
    return {"action": "restored", "report": report, "remaining": remaining}


def status(engine: Engine, out=print) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        info = {
            "revision": _revision(conn),
            "task_instance_history": sa.inspect(conn).has_table("task_instance_history"),
            "state": _state(conn),
            "holding": {
                t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()
                for t in _holding_tables(conn)
            },
        }
    out(json.dumps(info, indent=2, sort_keys=True))
    return info


def require_34() -> None:
    """Refuse to run with a 3.3 installation: its ``airflow db migrate`` would re-apply our 3.3 migrations."""
    from importlib.metadata import version

    installed = version("apache-airflow-core")
    if tuple(int(p) for p in installed.split(".")[:2]) < (3, 4):
        raise Refused(f"run this with the 3.4 installation (.venv-3.4), not apache-airflow-core {installed}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("prepare", "restore", "run", "status"))
    parser.add_argument("--conn", help="SQLAlchemy URL (default: Airflow's [database] sql_alchemy_conn)")
    args = parser.parse_args(argv)
    engine = make_engine(args.conn or airflow_conn())
    try:
        if args.step in ("prepare", "run"):
            require_34()
        if args.step == "status":
            status(engine)
        if args.step in ("prepare", "run"):
            prepare(engine)
        if args.step == "run":
            engine.dispose()
            airflow = Path(sys.executable).with_name("airflow")
            env = {**os.environ, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": args.conn} if args.conn else None
            print(f"running {airflow} db migrate", flush=True)
            subprocess.run([str(airflow), "db", "migrate"], check=True, env=env)
        if args.step in ("restore", "run"):
            restore(engine)
    except Refused as e:
        print(f"refused: {e}", file=sys.stderr)
        return 2
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
