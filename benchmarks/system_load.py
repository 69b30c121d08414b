#!/usr/bin/env python
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
Benchmark (issue 39, part 1): the whole system under a mixed load, patched against unpatched.

Each side is a real deployment started with ``tests/harness.py``'s ``Stack``: a PostgreSQL database
of its own (cloned from the venv's migrated template), a private ``redis-server`` (Celery broker and
result backend), the api-server, the Dag processor, the scheduler (CeleryExecutor) and two Celery
workers (``--concurrency`` each, default 2).

* patched: this checkout's venv (``sys.prefix``; e.g. ``/work/main/.venv``) with ``[core]
  max_infra_retries = 1`` (AIP-122 on) and every other patch-set setting at its default.
* unpatched: the line's unpatched release with every pinned provider
  (``harness.unpatched_venv(providers=True)``).

The load: ``--dags`` Dags (default 200) of ``--tasks`` short tasks each (default 10; ``--scale``:
1,000 x 10 = 10,000 task instances). Every task has ``retries=1`` and ``retry_delay=5 s`` (upstream's
300 s would make both sides' wall time a sleep). On the first try only, by the task instance's
global index ``i`` (``bucket = i * 37 % 100``, a permutation of every 100 consecutive indices, so the
failures spread over the Dags):

* buckets 0-9 (10%) raise ``ValueError`` (cause ``application``) and are retried once;
* buckets 10-11 (2%) time out (``execution_timeout=2 s``, the try sleeps 60 s; cause ``timeout``);
* buckets 12-14 (3%) lose their worker: the task SIGKILLs its parent, the Celery pool child that runs
  the task's supervisor, then itself (a pool child killed by the OOM killer, say). Celery reports the
  task as ``WorkerLostError`` and the pool starts a new child. That is the lost try of a Celery
  deployment that a worker *process* can show without killing the whole worker: the patched
  executor records it as ``infra`` (the task process dies with its supervisor) and AIP-122 retries
  it at once without spending ``retries``; upstream fails the try on Celery's failure result and
  spends the retry after ``retry_delay``.

Half the Dags (odd index) carry a retry policy. Both sides get
``RetryRule(exception=ValueError, action=RETRY, retry_delay=5 s)`` (upstream's AIP-105 rule); the
patched side also ``RetryRule(cause="infra", action=RETRY)`` and ``RetryRule(cause="timeout",
action=RETRY, retry_delay=5 s)``, which only the patched Task SDK can import: the Dag files are
written per side. None of these rules changes an outcome, so both sides do the same work; the
patched side pays for evaluating them.

The figures, per side, over the interval from the first trigger to the moment every Dag run has
ended (polled every second):

* wall time from the first trigger to the last task instance's ``end_date``; with the part of the
  task instances that never lost a try (``rest``) apart from those that did (``lost``);
* scheduler CPU seconds (user + system of the scheduler's process tree, psutil, reaped children
  included);
* SQL statements per task instance: every statement the Airflow processes send, counted by an
  ``airflow_local_settings.py`` this benchmark puts in the deployment's ``config`` folder (a
  SQLAlchemy ``before_cursor_execute`` listener; per component, read from the files it writes),
  and PostgreSQL's own ``pg_stat_database`` deltas for the deployment's database (transactions and
  tuples);
* the scheduler loop's p50 and p99 (its StatsD timer ``scheduler.scheduler_loop_duration``, received
  by ``harness.StatsdReceiver``; the loop's idle sleep is outside the timer);
* peak RSS of the scheduler's and the api-server's process trees (sampled every second).

Finding where the cost goes:

* ``--detail``: per side, PostgreSQL's per-table and per-index scan counters over the load
  (``pg_stat_user_tables`` / ``pg_stat_user_indexes`` deltas: which relation the tuples are read
  from; for tables also the updates and how many of them were HOT, i.e. added no index entry),
  and per component the statements whose counts differ most between the sides (the counting
  listener also keys each statement by its text). When the PostgreSQL server preloads
  ``pg_stat_statements`` (``shared_preload_libraries``; ``.ci/services.sh`` does not set it, so it
  is the operator's choice and a restart of the server), ``--detail`` also lists per side the
  statements that read the most buffers over the load, with their calls and rows;
* ``--explain [RATE]``: every statement's plan (or a sampled fraction ``RATE`` of them) with its
  actual rows and buffers in the PostgreSQL server's log (``auto_explain``, loaded per connection
  through ``PGOPTIONS``, so for this deployment only; it slows both sides alike);
* ``--py-spy DIR``: a py-spy sampling profile (50 Hz, collapsed stacks) of the scheduler under the
  load, ``DIR/<side>.txt`` (``DIR/<side>-<pair>.txt`` with ``--pairs``; py-spy must be installed
  in the venv that runs this script);
* ``--profile-scheduler``: the in-process CPU sampler below (no py-spy needed).

The two sides run one after the other (``--order``), not at once: on a 2-core machine two
deployments side by side would take CPU from each other and the CPU and loop figures would measure
the contention. One side's CPU per scheduler loop varies by up to 10% from one run to the next on a
shared host (same build, same load), more than the 5% target, so one pair cannot settle a ratio
near it. ``--pairs N`` runs N pairs, alternating the order (the first as ``--order`` says, the next
the other way round), prints each pair's table, then per figure every pair's ratio, their geometric
mean, lowest and highest; the targets are judged on the geometric mean.

Each side's database is new. While the load's task instances are being created, the benchmark runs
``ANALYZE task_instance, dag_run`` every two seconds (then once more when all exist), on both sides
alike: without it the first analyze of ``task_instance`` waits for autovacuum's next visit (up to
``autovacuum_naptime``, a minute), and until then the planner runs the scheduler's critical-section
query (upstream's) by nested loops over the whole table, about a second per scheduler loop at 2,000
task instances. That plan is the patched build's: its four ``task_instance`` columns take the row
PostgreSQL estimates from the declared widths over a page, upstream's stays under one, and
upstream's first-minute plan is cheaper (docs/operations.md, "The tuples read"). How many loops pay
it is set by where autovacuum's visit falls, so it swamped the database-read and loop-p99 ratios of
earlier pairs (up to 4.8 and 1.71) with a figure of autovacuum's timing; a deployment with a history
has statistics. ``--cold-statistics`` leaves it to autovacuum, to see that effect.

Usage::

    /work/main/.venv/bin/python benchmarks/system_load.py --dags 20 --tasks 10
    .venv/bin/python benchmarks/system_load.py            # 200 x 10 = 2,000 task instances
    .venv/bin/python benchmarks/system_load.py --scale    # 1,000 x 10 = 10,000 (a bigger machine)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import harness  # noqa: E402

import lines  # noqa: E402

OUT_VAR = "SYSTEM_LOAD_OUT"
SQL_VAR = "SYSTEM_LOAD_SQL_OUT"
RETRY_DELAY_S = 5
TIMEOUT_S = 2

#: Targets of issue 39: patched / unpatched.
TARGETS = {"scheduler_cpu_s": 1.05, "statements_per_ti": 1.05, "loop_p99_ms": 1.10}


def kind(index: int) -> str:
    """What the task instance with global index ``index`` does on its first try."""
    bucket = index * 37 % 100
    if bucket < 10:
        return "raise"
    if bucket < 12:
        return "timeout"
    if bucket < 15:
        return "kill"
    return "ok"


_DAG_TEMPLATE = '''\
"""Written by benchmarks/system_load.py ({side} side)."""
import os
import signal
import time
from datetime import datetime, timedelta

from airflow.sdk import DAG, task
{policy_import}

KINDS = {kinds!r}
{policy}


def work(kind, ti=None):
    if ti.try_number != 1:
        return
    if kind == "raise":
        raise ValueError("injected application failure")
    if kind == "timeout":
        time.sleep(60)
    if kind == "kill":
        # Lose the worker process: the Celery pool child running this task's supervisor, then this
        # task process (as the pool child's death takes it along).
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


with DAG(
    "{dag_id}",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    default_args={{"retries": 1, "retry_delay": timedelta(seconds={retry_delay})}},
):
    for n, k in enumerate(KINDS):
        task(
            task_id=f"t{{n:03d}}",
            execution_timeout=timedelta(seconds={timeout}) if k == "timeout" else None,
            retry_policy=POLICY,
        )(work)(k)
'''

_POLICY_UNPATCHED = f"""
POLICY = ExceptionRetryPolicy(
    rules=[RetryRule(exception=ValueError, action=RetryAction.RETRY, retry_delay=timedelta(seconds={RETRY_DELAY_S}))]
)"""

_POLICY_PATCHED = f"""
POLICY = ExceptionRetryPolicy(
    rules=[
        RetryRule(exception=ValueError, action=RetryAction.RETRY, retry_delay=timedelta(seconds={RETRY_DELAY_S})),
        RetryRule(cause="infra", action=RetryAction.RETRY),
        RetryRule(cause="timeout", action=RetryAction.RETRY, retry_delay=timedelta(seconds={RETRY_DELAY_S})),
    ]
)"""


def dag_id(d: int) -> str:
    return f"system_load_{d:04d}"


def dag_file(d: int, tasks: int, patched: bool) -> str:
    """Dag ``d``'s file for one side: ``tasks`` tasks, half the Dags (odd ``d``) with a retry policy."""
    with_policy = d % 2 == 1
    policy = (_POLICY_PATCHED if patched else _POLICY_UNPATCHED) if with_policy else "POLICY = None"
    policy_import = (
        "from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction, RetryRule"
        if with_policy
        else ""
    )
    return _DAG_TEMPLATE.format(
        side="patched" if patched else "unpatched",
        policy_import=policy_import,
        kinds=[kind(d * tasks + n) for n in range(tasks)],
        policy=policy,
        dag_id=dag_id(d),
        retry_delay=RETRY_DELAY_S,
        timeout=TIMEOUT_S,
    )


#: ``$AIRFLOW_HOME/config/airflow_local_settings.py`` of both sides: counts every statement each
#: Airflow process sends (a forked child counts its own) and writes the count, with the process
#: group (each component is started in its own), to ``$SYSTEM_LOAD_SQL_OUT/<pid>.json``.
LOCAL_SETTINGS = '''\
"""Written by benchmarks/system_load.py: count the SQL statements of this process."""
import json
import os
import threading
import time

_OUT = os.environ.get("SYSTEM_LOAD_SQL_OUT")
_state = {"count": 0, "written": -1, "by_statement": {}}


def _count(conn, cursor, statement, parameters, context, executemany):
    _state["count"] += 1
    key = " ".join(statement.split())[:400]
    _state["by_statement"][key] = _state["by_statement"].get(key, 0) + 1


def _writer():
    path = os.path.join(_OUT, f"{os.getpid()}.json")
    while True:
        time.sleep(0.5)
        if _state["count"] != _state["written"]:
            _state["written"] = _state["count"]
            with open(path + ".tmp", "w") as f:
                json.dump(
                    {
                        "pid": os.getpid(),
                        "pgid": os.getpgid(0),
                        "statements": _state["count"],
                        "by_statement": dict(_state["by_statement"]),
                    },
                    f,
                )
            os.replace(path + ".tmp", path)


def _start():
    _state["count"], _state["written"], _state["by_statement"] = 0, 0, {}
    threading.Thread(target=_writer, daemon=True, name="system-load-sql-count").start()


def _where(code):
    path = code.co_filename
    path = path.split("site-packages/", 1)[-1]
    return f"{path}:{code.co_name}"


def _sample_scheduler():
    """A CPU sampling profile of the scheduler's main thread (issue 39: py-spy is not available).

    Every 10 ms, the main thread's CPU time since the last sample is put on the functions of its
    stack (inclusive) and on the innermost one (self); written every 2 s.
    """
    import sys

    main = threading.main_thread()
    clock = time.pthread_getcpuclockid(main.ident)
    inclusive, own, total = {}, {}, 0.0
    last = time.clock_gettime(clock)
    path = os.path.join(_OUT, f"profile-{os.getpid()}.json")
    written = time.monotonic()
    while True:
        time.sleep(0.01)
        now = time.clock_gettime(clock)
        spent, last = now - last, now
        frame = sys._current_frames().get(main.ident)
        if frame is None or spent <= 0:
            continue
        total += spent
        own[_where(frame.f_code)] = own.get(_where(frame.f_code), 0.0) + spent
        seen = set()
        while frame is not None:
            seen.add(_where(frame.f_code))
            frame = frame.f_back
        for name in seen:
            inclusive[name] = inclusive.get(name, 0.0) + spent
        if time.monotonic() - written > 2:
            written = time.monotonic()
            with open(path + ".tmp", "w") as f:
                json.dump({"total": total, "inclusive": inclusive, "self": own}, f)
            os.replace(path + ".tmp", path)


if _OUT:
    import sys

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    event.listen(Engine, "before_cursor_execute", _count)
    _start()
    os.register_at_fork(after_in_child=_start)
    if os.environ.get("SYSTEM_LOAD_PROFILE") and sys.argv[1:2] == ["scheduler"]:
        threading.Thread(target=_sample_scheduler, daemon=True, name="system-load-profile").start()
'''


def read_profile(sql_out: Path) -> dict[str, Any]:
    """The scheduler's sampled CPU profile so far (``--profile-scheduler``), or an empty one."""
    empty: dict[str, Any] = {"total": 0.0, "inclusive": {}, "self": {}}
    found = sorted(sql_out.glob("profile-*.json"))
    try:
        return json.loads(found[-1].read_text()) if found else empty
    except (OSError, ValueError):
        return empty


def profile_summary(before: dict[str, Any], after: dict[str, Any], top: int = 70) -> str:
    """The functions with the most scheduler CPU between two profiles (inclusive, then self)."""
    total = after["total"] - before["total"]

    def delta(kind: str) -> list[tuple[str, float]]:
        spent = {k: v - before[kind].get(k, 0.0) for k, v in after[kind].items()}
        return sorted(spent.items(), key=lambda kv: -kv[1])[:top]

    out = [f"scheduler main thread: {total:.1f} s CPU sampled under the load; inclusive seconds:"]
    out += [f"  {v:7.2f} {100 * v / (total or 1):5.1f}%  {k}" for k, v in delta("inclusive")]
    out.append("self seconds:")
    out += [f"  {v:7.2f} {100 * v / (total or 1):5.1f}%  {k}" for k, v in delta("self")]
    return "\n".join(out)


def statement_counts(sql_out: Path, groups: dict[str, int]) -> dict[str, int]:
    """Statements counted so far, by component (the process group it was started in)."""
    by_pgid = {pgid: name for name, pgid in groups.items()}
    totals: dict[str, int] = {}
    for path in sql_out.glob("[0-9]*.json"):  # not the profile-<pid>.json
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        name = by_pgid.get(record["pgid"], "other")
        totals[name] = totals.get(name, 0) + record["statements"]
    return totals


def statements_by_text(sql_out: Path, groups: dict[str, int]) -> dict[str, dict[str, int]]:
    """Statements counted so far, by component and by statement text (whitespace collapsed, cut at 400)."""
    by_pgid = {pgid: name for name, pgid in groups.items()}
    totals: dict[str, dict[str, int]] = {}
    for path in sql_out.glob("[0-9]*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        into = totals.setdefault(by_pgid.get(record["pgid"], "other"), {})
        for text, n in record.get("by_statement", {}).items():
            into[text] = into.get(text, 0) + n
    return totals


@contextmanager
def pg_cursor(db: str) -> Iterator[Any]:
    """An autocommit cursor on one database of the project's PostgreSQL, as its superuser."""
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", password="postgres", dbname=db)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            yield cur
    finally:
        conn.close()


def pg_relation_stats(db: str) -> dict[str, dict[str, int]]:
    """Per-table and per-index scan counters of one database (``pg_stat_user_tables``/``_indexes``)."""
    with pg_cursor(db) as cur:
        cur.execute(
            "SELECT relname, coalesce(seq_scan, 0), coalesce(seq_tup_read, 0), coalesce(idx_scan, 0), "
            "coalesce(idx_tup_fetch, 0), n_tup_ins + n_tup_upd + n_tup_del, n_tup_upd, n_tup_hot_upd "
            "FROM pg_stat_user_tables"
        )
        out = {
            f"table {r[0]}": dict(
                zip(
                    (
                        "seq_scan",
                        "seq_tup_read",
                        "idx_scan",
                        "idx_tup_fetch",
                        "written",
                        "upd",
                        "hot_upd",
                    ),
                    r[1:],
                )
            )
            for r in cur.fetchall()
        }
        cur.execute(
            "SELECT relname || '.' || indexrelname, idx_scan, idx_tup_read, idx_tup_fetch FROM pg_stat_user_indexes"
        )
        out.update(
            {
                f"index {r[0]}": dict(zip(("idx_scan", "idx_tup_read", "idx_tup_fetch"), r[1:]))
                for r in cur.fetchall()
            }
        )
        return out


def pg_statements_enabled(db: str) -> bool:
    """Whether the server preloads ``pg_stat_statements``; if so, the extension is created in ``db``."""
    loaded = harness.pg_admin_execute("SHOW shared_preload_libraries")[0][0]
    if "pg_stat_statements" not in loaded:
        return False
    with pg_cursor(db) as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return True


def pg_statements(db: str) -> dict[str, dict[str, Any]]:
    """``pg_stat_statements``' cumulative counters of one database's statements, by query id."""
    with pg_cursor(db) as cur:
        cur.execute(
            "SELECT queryid::text, query, calls, rows, shared_blks_hit + shared_blks_read, total_exec_time "
            "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s",
            (db,),
        )
        out: dict[str, dict[str, Any]] = {}
        for qid, query, calls, rows, blocks, ms in cur.fetchall():
            into = out.setdefault(qid, {"query": query, "calls": 0, "rows": 0, "blocks": 0, "ms": 0.0})
            into["calls"] += calls
            into["rows"] += rows
            into["blocks"] += blocks
            into["ms"] += ms
        return out


def statements_delta(
    before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    out = {}
    for qid, c in after.items():
        b = before.get(qid, {})
        d = {k: c[k] - b.get(k, 0) for k in ("calls", "rows", "blocks", "ms")}
        if d["calls"]:
            out[qid] = {"query": c["query"], **d}
    return out


def stats_delta(
    before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    return {
        name: {k: v - before.get(name, {}).get(k, 0) for k, v in counters.items()}
        for name, counters in after.items()
    }


PG_COUNTERS = (
    "xact_commit",
    "xact_rollback",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
)


def pg_counters(db: str) -> dict[str, int]:
    """``pg_stat_database``'s counters of one database (PostgreSQL flushes them about once a second)."""
    row = harness.pg_admin_execute(
        f"SELECT {', '.join(PG_COUNTERS)} FROM pg_stat_database WHERE datname = %s", (db,)
    )[0]
    return dict(zip(PG_COUNTERS, map(int, row)))


class StatisticsKeeper:
    """Keeps the planner's statistics of ``task_instance`` and ``dag_run`` current while the load's
    task instances are being created (``ANALYZE`` every two seconds until all exist, then once more).

    The deployment's database is new, so when the first Dag runs are created its tables have never
    been analyzed, and autovacuum analyzes them only at its next visit (``autovacuum_naptime``, up
    to a minute later, at a moment that differs from run to run). Until then the planner takes the
    scheduler's critical-section query (upstream's, the same on both sides) for one over an empty
    ``task_instance`` and joins it by nested loops that rescan the whole table per scheduled task
    instance: about a second per scheduler loop at 2,000 task instances. The patched build's wider
    estimated row is what tips the planner there (upstream's first-minute plan is cheaper), but how
    many loops pay is set by where autovacuum's visit falls, and a deployment with a history has
    statistics. ``--cold-statistics`` leaves it to autovacuum.
    """

    def __init__(self, db: str, n_tis: int) -> None:
        self.db = db
        self.n_tis = n_tis
        self.rounds = 0
        self.last_s: float | None = None
        self._stop = threading.Event()
        self._t0 = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._t0 = time.time()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with pg_cursor(self.db) as cur:
            while not self._stop.is_set():
                cur.execute("SELECT count(*) FROM task_instance")
                complete = cur.fetchone()[0] >= self.n_tis
                cur.execute("ANALYZE task_instance, dag_run")
                self.rounds += 1
                self.last_s = time.time() - self._t0
                if complete:
                    return
                self._stop.wait(2)


class TreeSampler:
    """Samples the summed RSS of a few process trees every second (peak kept), in a thread."""

    def __init__(self, roots: dict[str, int]) -> None:
        self.roots = roots
        self.peak_rss = dict.fromkeys(roots, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def tree(pid: int) -> list:
        import psutil

        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            for name, pid in self.roots.items():
                rss = 0
                try:
                    for proc in self.tree(pid):
                        try:
                            rss += proc.memory_info().rss
                        except psutil.NoSuchProcess:
                            pass
                except psutil.NoSuchProcess:
                    continue
                self.peak_rss[name] = max(self.peak_rss[name], rss)
            self._stop.wait(1.0)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process tree: the live processes and the children they have reaped."""
    import psutil

    total = 0.0
    for proc in TreeSampler.tree(pid):
        try:
            t = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of ``values`` (NaN if there are none)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def loop_durations(lines_: list[str]) -> list[float]:
    """The scheduler loop's durations (ms) in StatsD lines ``<prefix>.scheduler.scheduler_loop_duration:<v>|ms``."""
    found = []
    for line in lines_:
        name, _, rest = line.partition(":")
        if name.split(",")[0].endswith("scheduler.scheduler_loop_duration") and rest.endswith("|ms"):
            found.append(float(rest[:-3]))
    return found


def run_side(label: str, venv: Path, patched: bool, args: argparse.Namespace) -> dict[str, Any]:
    """Deploy one side, run the load on it, return its figures."""
    n_dags, n_tasks = args.dags, args.tasks
    with TemporaryDirectory(prefix=f"system_load_{label}_") as tmp, harness.StatsdReceiver() as statsd:
        home = Path(tmp) / "home"
        sql_out = home / "sqlcount"
        sql_out.mkdir(parents=True)
        config = {
            # Upstream's defaults but for quick Dag discovery and no periodic re-parse of the unchanged
            # Dag files (its CPU would compete with the scheduler's on a small machine, both sides alike).
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            SQL_VAR: str(sql_out),
        }
        if args.profile_scheduler:
            config["SYSTEM_LOAD_PROFILE"] = "1"
        if args.explain is not None:
            # Every (sampled) statement's plan with its actual rows, in the PostgreSQL server's log (a debugging
            # aid: it slows both sides down alike). Set per connection, for this deployment only.
            config["PGOPTIONS"] = (
                "-c session_preload_libraries=auto_explain -c auto_explain.log_min_duration=0 "
                "-c auto_explain.log_analyze=on -c auto_explain.log_timing=off -c auto_explain.log_buffers=on "
                f"-c auto_explain.sample_rate={args.explain}"
            )
        if patched:
            config["AIRFLOW__CORE__MAX_INFRA_RETRIES"] = "1"
        stack = harness.Stack(
            f"t_sysload_{label}",
            home,
            venv=venv,
            executor="CeleryExecutor",
            tuned=False,
            config=config,
            out_var=OUT_VAR,
        )
        (home / "config").mkdir(exist_ok=True)
        (home / "config" / "airflow_local_settings.py").write_text(LOCAL_SETTINGS)
        for d in range(n_dags):
            (stack.dags_folder / f"{dag_id(d)}.py").write_text(dag_file(d, n_tasks, patched))
        dag_ids = [dag_id(d) for d in range(n_dags)]
        with stack:
            for k in (1, 2):
                # Two workers in one AIRFLOW_HOME: each its own log-server port.
                stack.start_component(
                    "celery",
                    "worker",
                    "--concurrency",
                    str(args.concurrency),
                    "--celery-hostname",
                    f"worker-{k}@system-load",
                    name=f"worker-{k}",
                    config={"AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(harness.free_port())},
                )
            stack.wait_parsed(*dag_ids, timeout=max(300, n_dags * 3))
            stack.wait_for(
                lambda: all("ready." in stack.log_text(f"worker-{k}") for k in (1, 2)),
                timeout=180,
                what=f"{label}: both Celery workers ready",
            )
            time.sleep(args.settle)
            procs = stack.env.procs
            groups = {name: proc.pid for name, proc in procs.items()}  # each its own process group
            db = stack.db_url.rsplit("/", 1)[1]
            sched = procs["scheduler"].pid
            spy = None
            if args.py_spy:
                import subprocess

                # A sampling profile of the scheduler's Python threads (py-spy, from outside), as a
                # speedscope/flamegraph file; --idle left off: only the samples that are running.
                spy = subprocess.Popen(
                    [
                        str(Path(sys.executable).with_name("py-spy")),
                        "record",
                        "--pid",
                        str(sched),
                        "--rate",
                        "50",
                        "--format",
                        "raw",
                        "--output",
                        str(args.py_spy / f"{label}{args.pair_suffix}.txt"),
                        "--nonblocking",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            with TreeSampler({"scheduler": sched, "api-server": procs["api-server"].pid}) as sampler:
                cpu0 = cpu_seconds(sched)
                profile0 = read_profile(sql_out)
                sql0 = statement_counts(sql_out, groups)
                pg0 = pg_counters(db)
                rel0 = pg_relation_stats(db)
                pss = args.detail and pg_statements_enabled(db)
                pss0 = pg_statements(db) if pss else {}
                text0 = statements_by_text(sql_out, groups)
                statsd0 = len(statsd.lines)
                keeper = None if args.cold_statistics else StatisticsKeeper(db, n_dags * n_tasks)
                t0 = time.time()
                if keeper is not None:
                    keeper.start()
                for dag in dag_ids:
                    stack.trigger(dag)
                triggered_s = time.time() - t0
                ended = "SELECT count(*) AS n FROM dag_run WHERE state IN ('success', 'failed')"
                stack.wait_for(
                    lambda: stack.query(ended)[0]["n"] == n_dags,
                    timeout=args.timeout,
                    interval=1,
                    what=f"{label}: every Dag run ended",
                )
                t_done = time.time()
                if keeper is not None:
                    keeper.stop()
                    last = (
                        "never"
                        if keeper.last_s is None
                        else f"the last {keeper.last_s:.1f} s after the first trigger"
                    )
                    print(f"{label}: ANALYZE task_instance, dag_run x{keeper.rounds}, {last}", flush=True)
                cpu1 = cpu_seconds(sched)
                time.sleep(1.5)  # the last statement counts and PostgreSQL's statistics flush
                sql1 = statement_counts(sql_out, groups)
                pg1 = pg_counters(db)
                rel1 = pg_relation_stats(db)
                pss1 = pg_statements(db) if pss else {}
                text1 = statements_by_text(sql_out, groups)
                loop = loop_durations(statsd.lines[statsd0:])
                if args.profile_scheduler:
                    print(f"{label}: " + profile_summary(profile0, read_profile(sql_out)), flush=True)
                if spy is not None:
                    import signal

                    spy.send_signal(signal.SIGINT)
                    spy.wait(timeout=60)
            tis = stack.query(f"SELECT dag_id, task_id, state, try_number, end_date FROM {lines.LIVE_TRIES}")
            past = stack.query(f"SELECT count(*) AS n FROM {lines.PAST_TRIES}")[0]["n"]
            causes = (
                stack.query(
                    f"SELECT coalesce(failure_cause, 'none') AS cause, count(*) AS n FROM {lines.PAST_TRIES} "
                    "GROUP BY 1 ORDER BY 1"
                )
                if patched
                else []
            )
    n_tis = n_dags * n_tasks
    ends = {(r["dag_id"], r["task_id"]): r["end_date"].timestamp() for r in tis if r["end_date"]}
    lost = {
        (dag_id(d), f"t{n:03d}")
        for d in range(n_dags)
        for n in range(n_tasks)
        if kind(d * n_tasks + n) == "kill"
    }
    rest_end = max((t for key, t in ends.items() if key not in lost), default=t0)
    lost_end = max((t for key, t in ends.items() if key in lost), default=t0)
    statements = {name: sql1.get(name, 0) - sql0.get(name, 0) for name in sorted({*sql0, *sql1})}
    pg = {key: pg1[key] - pg0[key] for key in PG_COUNTERS}
    states: dict[str, int] = {}
    for r in tis:
        states[r["state"]] = states.get(r["state"], 0) + 1
    by_text = {
        comp: {t: n - text0.get(comp, {}).get(t, 0) for t, n in texts.items()}
        for comp, texts in text1.items()
    }
    return {
        "label": label,
        "relations": stats_delta(rel0, rel1),
        "pg_statements": statements_delta(pss0, pss1),
        "by_statement": by_text,
        "tis": n_tis,
        "tries": past + len(tis),
        "states": states,
        "causes": {r["cause"]: r["n"] for r in causes},
        "triggered_s": triggered_s,
        "wall_s": max(rest_end, lost_end) - t0,
        "wall_rest_s": rest_end - t0,
        "wall_lost_s": lost_end - t0,
        "observed_s": t_done - t0,
        "scheduler_cpu_s": cpu1 - cpu0,
        "statements": statements,
        "statements_per_ti": sum(statements.values()) / n_tis,
        "scheduler_statements_per_ti": statements.get("scheduler", 0) / n_tis,
        "api_statements_per_ti": statements.get("api-server", 0) / n_tis,
        "xact_per_ti": (pg["xact_commit"] + pg["xact_rollback"]) / n_tis,
        "tup_written_per_ti": (pg["tup_inserted"] + pg["tup_updated"] + pg["tup_deleted"]) / n_tis,
        "tup_read_per_ti": (pg["tup_returned"] + pg["tup_fetched"]) / n_tis,
        "loop_n": len(loop),
        "scheduler_statements_per_loop": statements.get("scheduler", 0) / max(1, len(loop)),
        "scheduler_cpu_ms_per_loop": 1000 * (cpu1 - cpu0) / max(1, len(loop)),
        "loop_p50_ms": statistics.median(loop) if loop else float("nan"),
        "loop_p99_ms": percentile(loop, 99),
        "scheduler_peak_rss_mb": sampler.peak_rss["scheduler"] / 2**20,
        "api_peak_rss_mb": sampler.peak_rss["api-server"] / 2**20,
    }


ROWS = [
    ("wall_s", "wall time, first trigger to last task end (s)", "{:.1f}"),
    ("wall_rest_s", "  ... to the last TI that never lost a try (s)", "{:.1f}"),
    ("wall_lost_s", "  ... to the last TI that lost a try (s)", "{:.1f}"),
    ("scheduler_cpu_s", "scheduler CPU (s)", "{:.1f}"),
    ("statements_per_ti", "SQL statements per TI, all components", "{:.1f}"),
    ("scheduler_statements_per_ti", "  ... of the scheduler", "{:.1f}"),
    ("api_statements_per_ti", "  ... of the api-server", "{:.1f}"),
    ("xact_per_ti", "PostgreSQL transactions per TI", "{:.1f}"),
    ("tup_written_per_ti", "PostgreSQL tuples written per TI", "{:.1f}"),
    ("tup_read_per_ti", "PostgreSQL tuples read per TI", "{:.0f}"),
    ("loop_n", "scheduler loops", "{:.0f}"),
    ("scheduler_statements_per_loop", "  scheduler statements per loop", "{:.1f}"),
    ("scheduler_cpu_ms_per_loop", "  scheduler CPU per loop (ms)", "{:.1f}"),
    ("loop_p50_ms", "scheduler loop p50 (ms)", "{:.1f}"),
    ("loop_p99_ms", "scheduler loop p99 (ms)", "{:.1f}"),
    ("scheduler_peak_rss_mb", "scheduler peak RSS (MiB)", "{:.0f}"),
    ("api_peak_rss_mb", "api-server peak RSS (MiB)", "{:.0f}"),
]


def report(results: dict[str, dict[str, Any]]) -> None:
    sides = [s for s in ("patched", "unpatched") if s in results]
    for side in sides:
        r = results[side]
        print(
            f"{side}: {r['tis']} TIs, {r['tries']} tries, final states {r['states']}, triggered in "
            f"{r['triggered_s']:.1f} s, {r['loop_n']} scheduler loops; statements by component "
            f"{r['statements']}" + (f"; past tries by cause {r['causes']}" if r["causes"] else ""),
            flush=True,
        )
    header = f"{'figure':50s}" + "".join(f"{s:>11s}" for s in sides)
    if len(sides) == 2:
        header += f"{'ratio':>8s}  target"
    print(header)
    for key, text, fmt in ROWS:
        line = f"{text:50s}" + "".join(f"{fmt.format(results[s][key]):>11s}" for s in sides)
        if len(sides) == 2:
            base = results["unpatched"][key]
            ratio = results["patched"][key] / base if base else float("nan")
            target = TARGETS.get(key)
            verdict = f"  <= {target:.2f} {'met' if ratio <= target else 'MISSED'}" if target else ""
            line += f"{ratio:8.2f}{verdict}"
        print(line, flush=True)


def series_report(pairs: list[dict[str, dict[str, Any]]]) -> None:
    """Per figure, every pair's patched / unpatched ratio, their geometric mean, lowest and highest.

    Each pair's ratio is taken within the pair (the two sides ran minutes apart, on the same host
    state); the geometric mean weighs a pair run patched-first and one run unpatched-first alike,
    so a cost the order adds to whichever side runs first cancels out.
    """
    print(
        f"the series: {len(pairs)} pairs, orders "
        + ", ".join(p["patched"]["order"][0] for p in pairs)
        + " first"
    )
    print(f"{'figure':50s}{'pairs':>{8 * len(pairs)}s}{'geomean':>9s}{'low':>7s}{'high':>7s}  target")
    for key, text, _fmt in ROWS:
        ratios = [
            p["patched"][key] / p["unpatched"][key] if p["unpatched"][key] else float("nan") for p in pairs
        ]
        if any(math.isnan(r) or r <= 0 for r in ratios):
            mean = float("nan")
        else:
            mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        target = TARGETS.get(key)
        verdict = f"  <= {target:.2f} {'met' if mean <= target else 'MISSED'}" if target else ""
        print(
            f"{text:50s}"
            + "".join(f"{r:8.2f}" for r in ratios)
            + f"{mean:9.2f}{min(ratios):7.2f}{max(ratios):7.2f}{verdict}",
            flush=True,
        )


def detail_report(results: dict[str, dict[str, Any]], top: int = 15) -> None:
    """Where the reads and the statements go: per-relation tuple reads, and the scheduler's statements
    whose counts differ most between the sides (``--detail``)."""
    sides = [s for s in ("patched", "unpatched") if s in results]
    for side in sides:
        rel = results[side]["relations"]
        reads = sorted(
            rel.items(),
            key=lambda kv: (
                -(kv[1].get("idx_tup_fetch", 0) + kv[1].get("seq_tup_read", 0) + kv[1].get("idx_tup_read", 0))
            ),
        )[: 2 * top]
        print(f"{side}: relations by tuples read (delta over the load)")
        for name, c in reads:
            print(f"  {name:70s} {json.dumps(c)}")
        pss = results[side].get("pg_statements", {})
        if pss:
            print(f"{side}: statements by buffers read (pg_stat_statements, delta over the load)")
            for c in sorted(pss.values(), key=lambda c: -c["blocks"])[:top]:
                query = " ".join(c["query"].split())
                print(
                    f"  blocks {c['blocks']:9d} ms {c['ms']:9.0f} calls {c['calls']:7d} rows {c['rows']:8d}  {query[:300]}"
                )
    comps = sorted({c for side in sides for c in results[side]["by_statement"]})
    for comp in comps:
        texts = {t for side in sides for t in results[side]["by_statement"].get(comp, {})}
        counts = {t: [results[side]["by_statement"].get(comp, {}).get(t, 0) for side in sides] for t in texts}
        print(f"{comp}: statements by count ({' / '.join(sides)}), most first")
        for t, ns in sorted(counts.items(), key=lambda kv: -max(kv[1]))[:top]:
            print(f"  {' / '.join(f'{n:6d}' for n in ns)}  {t[:220]}")
        if len(sides) == 2:
            print(f"{comp}: statements whose count differs most (patched - unpatched)")
            for t, ns in sorted(counts.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1]))[:top]:
                print(f"  {ns[0] - ns[1]:+6d} ({ns[0]} / {ns[1]})  {t[:220]}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dags", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=10, help="tasks per Dag")
    parser.add_argument("--scale", action="store_true", help="1,000 Dags x 10 tasks = 10,000 task instances")
    parser.add_argument(
        "--concurrency", type=int, default=2, help="task slots per Celery worker (two workers)"
    )
    parser.add_argument("--order", choices=("patched-first", "unpatched-first"), default="patched-first")
    parser.add_argument(
        "--pairs",
        type=int,
        default=1,
        help="run this many pairs, alternating the order, and judge the targets on the geometric mean "
        "of their ratios",
    )
    parser.add_argument("--skip-unpatched", action="store_true")
    parser.add_argument(
        "--cold-statistics",
        action="store_true",
        help="leave the first ANALYZE of the new database's task_instance and dag_run to autovacuum "
        "(see StatisticsKeeper)",
    )
    parser.add_argument("--skip-patched", action="store_true")
    parser.add_argument(
        "--settle", type=float, default=10, help="seconds to let the deployment idle before the load"
    )
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds to wait for every Dag run to end"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--explain",
        nargs="?",
        const=1.0,
        type=float,
        metavar="RATE",
        help="log statements' plans with their actual rows and buffers in PostgreSQL's server log "
        "(auto_explain); RATE: the fraction of statements sampled (default: all)",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        help="record a py-spy profile of the scheduler under the load into this folder (<side>.txt, or <side>-<pair>.txt with --pairs; collapsed stacks)",
    )
    parser.add_argument(
        "--detail",
        action="store_true",
        help="print per-relation tuple reads and the statements whose counts differ between the sides",
    )
    parser.add_argument(
        "--profile-scheduler",
        action="store_true",
        help="sample the scheduler's main thread's CPU by function (adds a few %% CPU to both sides)",
    )
    args = parser.parse_args()
    if args.scale:
        args.dags, args.tasks = 1000, 10
    if args.py_spy and not Path(sys.executable).with_name("py-spy").exists():
        # Refused before the deployments start, not after the first side's parse.
        parser.error(
            f"--py-spy needs py-spy next to {sys.executable}: {Path(sys.executable).parent}/pip install py-spy"
        )
    if not harness.pg_available():
        print(harness.PG_UNREACHABLE, file=sys.stderr)
        return 1
    if args.explain is not None and not 0 < args.explain <= 1:
        # auto_explain.sample_rate takes 0 to 1; a value outside would only fail as the deployment
        # starts, in PostgreSQL's words.
        parser.error(
            f"--explain RATE is a fraction of the statements, over 0 and at most 1, not {args.explain}"
        )
    if args.pairs < 1:
        parser.error(f"--pairs must be at least 1, not {args.pairs}")
    if args.pairs > 1 and (args.skip_patched or args.skip_unpatched):
        parser.error("--pairs needs both sides: drop --skip-patched / --skip-unpatched")
    pairs: list[dict[str, dict[str, Any]]] = []
    for number in range(args.pairs):
        sides = [("patched", Path(sys.prefix), True), ("unpatched", None, False)]
        if (args.order == "unpatched-first") != (number % 2 == 1):
            sides.reverse()
        # Each pair's py-spy profiles in files of their own (DIR/<side>-<pair>.txt).
        args.pair_suffix = f"-{number + 1}" if args.pairs > 1 else ""
        if args.pairs > 1:
            print(f"pair {number + 1} of {args.pairs}: {sides[0][0]} first", flush=True)
        results: dict[str, dict[str, Any]] = {}
        for label, venv, patched in sides:
            if (patched and args.skip_patched) or (not patched and args.skip_unpatched):
                continue
            venv = venv or harness.unpatched_venv(providers=True)
            started = time.time()
            results[label] = run_side(label, venv, patched, args)
            results[label]["order"] = [side[0] for side in sides]
            print(f"{label}: side done in {time.time() - started:.0f} s", flush=True)
        report(results)
        if args.detail:
            detail_report(results)
        pairs.append(results)
        if args.json:
            # Written after every pair, so an interrupted series keeps the pairs it finished.
            args.json.write_text(json.dumps(pairs[0] if args.pairs == 1 else pairs, indent=2, default=str))
    if len(pairs) > 1:
        series_report(pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
