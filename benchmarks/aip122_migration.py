#!/usr/bin/env python
"""
Benchmark: migration 0125 (``infra_retry_count``, AIP-122) on PostgreSQL with 1,000 and 1,000,000 rows.

For each size: a fresh PostgreSQL database is migrated, ``task_instance`` is filled with that many
rows (one real task instance created by the CLI, cloned with ``generate_series`` over
``map_index``) and ``VACUUM ANALYZE``d; then, inside one Python process (the CLI's start-up is not
counted), the database is downgraded to AIP-97's revision (0124, dropping the column) and upgraded
to 0125 again, each step timed. The table's ``relfilenode`` before and after shows whether PostgreSQL
rewrote it: ``ADD COLUMN ... DEFAULT 0 NOT NULL`` is metadata-only on PostgreSQL 11+, so both sizes
should take about the same time.

Usage::

    .venv/bin/python benchmarks/aip122_migration.py [--sizes 1000 1000000]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from tempfile import TemporaryDirectory

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import harness  # noqa: E402

REVISION = "704a18c1acc7"
DOWN_REVISION = "5c1e97a4f0b3"
DAG_FILE = """
from datetime import datetime
from airflow.sdk import DAG, BaseOperator

class Noop(BaseOperator):
    def execute(self, context):
        return None

with DAG("aip122_mig_bench", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    Noop(task_id="t")
"""

TIMED = """
import json, time
from sqlalchemy import text
from airflow import settings
from airflow.utils.db import downgrade, upgradedb

def relfilenode():
    with settings.engine.connect() as conn:
        return conn.execute(text("SELECT relfilenode FROM pg_class WHERE relname = 'task_instance'")).scalar()

t0 = time.perf_counter()
downgrade(to_revision="{down}")
t1 = time.perf_counter()
before = relfilenode()
t2 = time.perf_counter()
upgradedb(to_revision="{rev}")
t3 = time.perf_counter()
print(json.dumps({{"downgrade_s": t1 - t0, "upgrade_s": t3 - t2, "rewritten": before != relfilenode()}}))
"""


def _pg(url: str, sql: str, *, fetch: bool = False):
    import psycopg2

    conn = psycopg2.connect(url.replace("postgresql+psycopg2://", "postgresql://"))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall() if fetch else None
    finally:
        conn.close()


def _fill(url: str, rows: int) -> None:
    cols = [
        c
        for (c,) in _pg(
            url,
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'task_instance' "
            "ORDER BY ordinal_position",
            fetch=True,
        )
    ]
    select = ", ".join(
        "gen_random_uuid()" if c == "id" else "g" if c == "map_index" else f'ti."{c}"' for c in cols
    )
    quoted = ", ".join(f'"{c}"' for c in cols)
    _pg(
        url,
        f"INSERT INTO task_instance ({quoted}) SELECT {select} FROM task_instance ti, "
        f"generate_series(1, {rows - 1}) g WHERE ti.map_index = -1",
    )
    _pg(url, "VACUUM ANALYZE task_instance")


def measure(rows: int) -> dict:
    with (
        TemporaryDirectory(prefix="aip122_migbench_") as tmp,
        harness.migrated_database("t_aip122_migbench") as url,  # at the head: the harness's template
    ):
        env = harness.AirflowEnv(Path(sys.prefix), Path(tmp) / "home", db_url=url)
        (env.dags_folder / "aip122_mig_bench.py").write_text(DAG_FILE)
        env.airflow("dags", "reserialize", timeout=300)
        env.airflow("dags", "trigger", "aip122_mig_bench", timeout=300)
        _fill(url, rows)
        count = _pg(url, "SELECT count(*) FROM task_instance", fetch=True)[0][0]
        size = _pg(url, "SELECT pg_size_pretty(pg_total_relation_size('task_instance'))", fetch=True)[0][0]
        out = env.run_python(TIMED.format(rev=REVISION, down=DOWN_REVISION), timeout=3600)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        return {"rows": count, "size": size, **result}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 1_000_000])
    args = parser.parse_args()
    if not harness.pg_available():
        print(harness.PG_UNREACHABLE, file=sys.stderr)
        return 1
    results = []
    for rows in args.sizes:
        r = measure(rows)
        results.append(r)
        print(
            f"{r['rows']:>9,} task_instance rows ({r['size']:>8}): upgrade to 0125 {r['upgrade_s'] * 1000:8.1f} ms, "
            f"downgrade {r['downgrade_s'] * 1000:8.1f} ms, table rewritten: {'yes' if r['rewritten'] else 'no'}",
            flush=True,
        )
    if len(results) >= 2:
        first, last = results[0], results[-1]
        print(
            f"upgrade time ratio {last['rows']:,} / {first['rows']:,} rows: "
            f"{last['upgrade_s'] / first['upgrade_s']:.2f}x "
            f"(rows ratio {last['rows'] / first['rows']:,.0f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
