"""The one harness of the end-to-end tests and the benchmarks: real Airflow components on private state.

* :class:`Stack`: a private Airflow deployment -- its own database (cloned from a migrated
  template), ``AIRFLOW_HOME``, ports (api-server, log servers) and, for Celery, its own
  ``redis-server`` -- running the components a test needs (api-server, scheduler, Dag processor,
  triggerer, Celery workers). A directory or module shares one stack where its tests need no other
  configuration; a component that needs its own is started with its own ``config``
  (``stack.start_component("scheduler", name=..., config={...})``).
* :class:`AirflowEnv`: an ``AIRFLOW_HOME`` and the processes started in it with one venv's
  interpreter, each in its own process group, its output in ``<home>/logs/<name>.log``;
  ``stop()`` (also on ``__exit__``) kills every process group it started.
* one way to wait (:func:`wait_for`), to query a metadata database (:func:`query`, PostgreSQL or
  SQLite, psycopg2's ``%(name)s`` parameters on both) and to check an HTTP endpoint
  (:func:`http_ok`).
* databases: :func:`migrated_database` clones a database migrated once per venv build (PostgreSQL
  ``CREATE DATABASE ... TEMPLATE``; SQLite: a copy of a migrated file) instead of running the
  migrations for every stack; :func:`pg_database` and :func:`backend_database` give empty ones.

Typical use::

    with Stack("t_x", tmp_path / "home", dags=[HERE / "dags"], config={...}) as stack:
        stack.wait_parsed("my_dag")
        run_id = stack.trigger("my_dag")
        ti = stack.wait_ti("my_dag", "task", {"success", "failed"}, timeout=120)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Self

REPO = Path(__file__).resolve().parents[1]
PG_ADMIN_URL = "postgresql+psycopg2://postgres:postgres@127.0.0.1:5432/postgres"
PG_UNREACHABLE = "PostgreSQL at 127.0.0.1:5432 is not reachable; run .ci/services.sh"

# --- waiting, querying, HTTP ------------------------------------------------------------------------


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float,
    interval: float = 0.5,
    what: str = "",
) -> Any:
    """Poll ``predicate`` until it returns a truthy value (returned); raise ``TimeoutError`` after ``timeout``.

    An exception from ``predicate`` counts as "not yet" (a database or server that is not up yet);
    the last one is named in the error and chained to it.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
        except Exception as e:  # noqa: BLE001 - the DB may not be ready yet, etc.
            last_exc = e
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    last = f" (last error: {last_exc!r})" if last_exc is not None else ""
    raise TimeoutError(f"timed out after {timeout}s waiting for {what or predicate}{last}") from last_exc


def http_ok(url: str, *, timeout: float = 5) -> bool:
    """Whether ``GET url`` answers 200 (any connection or HTTP error is ``False``)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def query(db_url: str, sql: str, **params: Any) -> list[dict[str, Any]]:
    """Run one statement on a metadata database (PostgreSQL or SQLite) and commit; return its rows.

    Parameters are written ``%(name)s`` and a literal ``%`` is ``%%`` (psycopg2's style), for both backends.
    """
    if db_url.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(db_url.split(":///", 1)[1], timeout=30)
        conn.row_factory = sqlite3.Row
        try:
            cur = conn.execute(re.sub(r"%\((\w+)\)s", r":\1", sql).replace("%%", "%"), params)
            rows = [dict(r) for r in cur.fetchall()] if cur.description else []
            conn.commit()
            return rows
        finally:
            conn.close()
    import psycopg2
    import psycopg2.extras

    conn = psycopg2.connect(db_url.replace("postgresql+psycopg2://", "postgresql://"))
    try:
        with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute(sql, params)
            rows = [dict(r) for r in cur.fetchall()] if cur.description else []
        conn.commit()
        return rows
    finally:
        conn.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON records of a file written one per line (none if it does not exist yet)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def log_records(text: str, marker: str) -> list[dict[str, str]]:
    """The ``key=value`` fields of each log line holding ``marker`` (e.g. ``"Task instance failure recorded:"``).

    A value is one word, or a JSON string in double quotes (decoded).
    """
    records = []
    for line in text.splitlines():
        _, found, body = line.partition(marker)
        if found:
            records.append(_key_values(body))
    return records


def _key_values(text: str) -> dict[str, str]:
    """The ``key=value`` fields of ``text``: a value is one word, or a JSON string in double quotes (decoded)."""
    return {
        key: json.loads(value) if value.startswith('"') else value
        for key, value in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', text)
    }


#: Where the AIP-97 fields start on the line a failure is logged with (``failure_log_fields``).
_FAILURE_FIELDS = re.compile(r" dag_id=\S+ task_id=\S+ run_id=\S+ map_index=\S+ failure_cause=")


def failure_lines(text: str) -> list[dict[str, str]]:
    """The scheduler's one line per recorded failure, as fields, with the text before them in ``message``.

    A failure the scheduler records is logged once: the line upstream already logs for it (e.g. the
    state-mismatch error ``handle_failure()`` logs) ends with ``dag_id=... failure_cause=... retry=...
    failure_reason=...``; a failure recorded without ``handle_failure()`` is logged as ``Task instance
    failure recorded: source=...`` with the same fields. ``message`` holds upstream's text (after the
    log prefix), unchanged.
    """
    records = []
    for line in text.splitlines():
        found = _FAILURE_FIELDS.search(line)
        if not found:
            continue
        fields = _key_values(line[found.start() :])
        fields["message"] = line[: found.start()]
        records.append(fields)
    return records


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (no such process, or a zombie its parent has not reaped)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StatsdReceiver:
    """A loopback UDP StatsD receiver (a thread) that keeps every metric line it gets and counts packets."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self.packets = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            self.packets += 1
            self.lines.extend(line for line in data.decode(errors="replace").splitlines() if line)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()

    def matching(self, prefix: str) -> list[str]:
        return [line for line in self.lines if line.startswith(prefix)]

    def tagged(self) -> list[tuple[str, dict[str, str]]]:
        """(name, tags) of each line received, read as InfluxDB-tagged StatsD: ``name,k=v,...:value|type``."""
        parsed = []
        for line in self.lines:
            name, *pairs = line.rsplit(":", 1)[0].split(",")
            parsed.append((name, dict(pair.split("=", 1) for pair in pairs if "=" in pair)))
        return parsed


# --- PostgreSQL -------------------------------------------------------------------------------------


def pg_url(db: str) -> str:
    return f"postgresql+psycopg2://postgres:postgres@127.0.0.1:5432/{db}"


def _pg_admin_connection():
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", password="postgres", dbname="postgres")
    conn.autocommit = True
    return conn


def pg_admin_execute(sql: str, params: tuple | None = None) -> list[tuple]:
    """Run one statement as the PostgreSQL superuser on the ``postgres`` database (autocommit)."""
    conn = _pg_admin_connection()
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def pg_available() -> bool:
    try:
        pg_admin_execute("SELECT 1")
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return False
    return True


def require_postgres() -> None:
    """Fail (never skip) the calling test when the PostgreSQL of ``.ci/services.sh`` is not reachable."""
    if not pg_available():
        import pytest

        pytest.fail(PG_UNREACHABLE)


def pg_drop(name: str) -> None:
    """Drop a database, ending its sessions first; nothing if it does not exist."""
    pg_admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def pg_database(prefix: str, *, template: str | None = None) -> Iterator[str]:
    """Create a PostgreSQL database ``<prefix>_<random>`` (empty, or a copy of ``template``); yield its URL; drop it."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}".lower()
    pg_admin_execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield pg_url(name)
    finally:
        with contextlib.suppress(Exception):
            pg_drop(name)


@contextlib.contextmanager
def backend_database(
    backend: str, tmp_path: Path, prefix: str, *, migrated_by: str | Path | None = None
) -> Iterator[str]:
    """Yield the URL of a fresh database: a SQLite file in ``tmp_path``, or PostgreSQL ``<prefix>_<random>``.

    Empty, or with ``migrated_by`` a venv: already at the head of that venv's migrations (a copy of its
    template, see :func:`migrated_database`). A migration test runs once per backend; PostgreSQL
    missing is a failure, not a skip.
    """
    if backend not in ("sqlite", "postgres", "postgresql"):
        raise ValueError(f"unknown database backend {backend!r} (sqlite or postgresql)")
    if migrated_by is not None:
        with migrated_database(prefix, venv=migrated_by, backend=backend, directory=tmp_path) as url:
            yield url
        return
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'airflow.db'}"
        return
    require_postgres()
    with pg_database(prefix) as url:
        yield url


# --- migrated-database templates --------------------------------------------------------------------

#: Where the migrated SQLite files are kept (one per venv build).
SQLITE_TEMPLATES = Path(os.environ.get("PATCHSET_DB_TEMPLATES", REPO / ".cache" / "db-templates"))


def _site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    if not found:
        raise RuntimeError(f"{venv} is not a venv (no lib/python3*/site-packages)")
    return found[-1]


def wheels_key(venv: str | Path) -> str:
    """A hash of the Airflow distributions installed in ``venv`` (their ``RECORD``, i.e. every file's sha256).

    A rebuilt venv whose patched wheels changed gets another key, and so another template.
    """
    digest = hashlib.sha256()
    for record in sorted(_site_packages(Path(venv)).glob("apache_airflow*.dist-info/RECORD")):
        digest.update(record.parent.name.encode() + b"\0" + record.read_bytes())
    return digest.hexdigest()[:12]


def _template_names(venv: Path) -> tuple[str, str]:
    """(the family of templates of this venv path, this build's template): ``tpl_<venv>_<wheels>``."""
    family = "tpl_" + hashlib.sha256(str(venv.resolve()).encode()).hexdigest()[:8]
    return family, f"{family}_{wheels_key(venv)}"


def _migrate(venv: Path, db_url: str) -> None:
    with tempfile.TemporaryDirectory(prefix="tpl-home-") as home:
        AirflowEnv(venv, home, db_url=db_url).airflow("db", "migrate", timeout=600)


def pg_template(venv: str | Path) -> str:
    """The name of a PostgreSQL database migrated to the head of ``venv``'s migrations; made once per build.

    Made under an advisory lock (concurrent sessions wait for the first one), migrated under a
    temporary name and renamed when complete, and closed to connections, so that ``CREATE DATABASE
    ... TEMPLATE`` can always copy it. Older templates of the same venv path are dropped.
    """
    venv = Path(venv).absolute()
    family, name = _template_names(venv)
    exists = "SELECT 1 FROM pg_database WHERE datname = %s"
    if pg_admin_execute(exists, (name,)):
        return name
    lock = int.from_bytes(hashlib.sha256(family.encode()).digest()[:8], "big", signed=True)
    conn = _pg_admin_connection()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (lock,))
            cur.execute(exists, (name,))
            if not cur.fetchall():
                building = f"{name}_building"
                cur.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
                cur.execute(f'CREATE DATABASE "{building}"')
                try:
                    _migrate(venv, pg_url(building))
                except BaseException:
                    cur.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
                    raise
                cur.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
                cur.execute(f'ALTER DATABASE "{name}" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false')
                cur.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
                    (f"{family}\\_%", name),
                )
                for (old,) in cur.fetchall():
                    with contextlib.suppress(Exception):
                        cur.execute(f'ALTER DATABASE "{old}" WITH IS_TEMPLATE false')
                        cur.execute(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)')
            cur.execute("SELECT pg_advisory_unlock(%s)", (lock,))
    finally:
        conn.close()
    return name


def sqlite_template(venv: str | Path) -> Path:
    """A SQLite file migrated to the head of ``venv``'s migrations; made once per build (file-locked)."""
    venv = Path(venv).absolute()
    family, name = _template_names(venv)
    SQLITE_TEMPLATES.mkdir(parents=True, exist_ok=True)
    path = SQLITE_TEMPLATES / f"{name}.sqlite"
    if path.exists():
        return path
    with open(SQLITE_TEMPLATES / f"{family}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            building = path.with_suffix(".building")
            building.unlink(missing_ok=True)
            _migrate(venv, f"sqlite:///{building}")
            os.replace(building, path)
            for old in SQLITE_TEMPLATES.glob(f"{family}_*.sqlite"):
                if old != path:
                    old.unlink(missing_ok=True)
    return path


def migrated_sqlite(venv: str | Path, directory: Path) -> str:
    """The URL of ``directory/airflow.db``, a copy of ``venv``'s migrated SQLite template."""
    target = Path(directory) / "airflow.db"
    shutil.copyfile(sqlite_template(venv), target)
    return f"sqlite:///{target}"


@contextlib.contextmanager
def migrated_database(
    prefix: str,
    *,
    venv: str | Path | None = None,
    backend: str = "postgresql",
    directory: Path | None = None,
) -> Iterator[str]:
    """Yield the URL of a new database at the head of ``venv``'s migrations (default: the running venv).

    PostgreSQL: ``<prefix>_<random>``, created from the venv's template and dropped afterwards.
    SQLite: a copy of the venv's migrated file in ``directory`` (required).
    """
    venv = Path(venv or sys.prefix)
    if backend == "sqlite":
        if directory is None:
            raise ValueError("a SQLite database needs a directory")
        yield migrated_sqlite(venv, directory)
        return
    if backend not in ("postgres", "postgresql"):
        raise ValueError(f"unknown database backend {backend!r} (sqlite or postgresql)")
    require_postgres()
    with pg_database(prefix, template=pg_template(venv)) as url:
        yield url


# --- processes --------------------------------------------------------------------------------------


def run_isolated_script(script: str, home: Path, *, timeout: float = 100) -> Any:
    """
    Run ``script`` in a fresh interpreter with its own AIRFLOW_HOME and SQLite database.

    Airflow reads its configuration once per process, so code that needs a clean Airflow (an
    executor, the ORM) runs there. The script prints a JSON document as its last line; return it.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


class AirflowEnv:
    """An ``AIRFLOW_HOME`` plus the processes started in it, all run with the interpreter of ``venv``."""

    def __init__(
        self,
        venv: str | Path,
        home: str | Path,
        *,
        db_url: str | None = None,
        dags_folder: str | Path | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.venv = Path(venv).absolute()
        self.home = Path(home).absolute()
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "logs").mkdir(exist_ok=True)
        self.dags_folder = Path(dags_folder) if dags_folder else self.home / "dags"
        self.dags_folder.mkdir(parents=True, exist_ok=True)
        self.db_url = db_url or f"sqlite:///{self.home / 'airflow.db'}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("AIRFLOW") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
        }
        self.env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(self.home / "plugins"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.db_url,
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
                "PATH": f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
                "PYTHONUNBUFFERED": "1",
                # Each stack's own log-server ports, not upstream's fixed 8793/8794: two stacks (the
                # two lines' suites in CI) would otherwise fight over them.
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
                # A worker's Execution API calls wait up to 30 s (upstream's 5 s): on a loaded 2-core
                # CI machine a slow api-server answer is load, not the failure a test is about.
                "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
            }
        )
        self.env.update(extra_env or {})

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def _run(self, argv: list[str], what: str, *, timeout: float, check: bool) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout, cwd=self.home, check=False
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
            )
        return proc

    def airflow(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        """Run one ``airflow`` CLI command to completion."""
        return self._run([str(self.venv / "bin" / "airflow"), *args], f"airflow {' '.join(args)}", timeout=timeout, check=check)

    def run_python(self, code: str, *, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        """Run a Python snippet with this environment's interpreter and settings."""
        return self._run([self.python, "-c", code], "python snippet", timeout=timeout, check=check)

    def start(self, *args: str, name: str | None = None, extra_env: dict[str, str | None] | None = None) -> subprocess.Popen:
        """Start ``airflow <args>`` in the background, in a new process group.

        ``extra_env`` goes on top of the environment; a value of ``None`` removes the variable.
        """
        name = name or args[0]
        env = {k: v for k, v in {**self.env, **(extra_env or {})}.items() if v is not None}
        log = (self.home / "logs" / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [str(self.venv / "bin" / "airflow"), *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.home,
            start_new_session=True,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def log_text(self, name: str) -> str:
        path = self.home / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, name: str | None = None, *, grace: float = 5.0) -> None:
        """Stop one started component (or all): SIGTERM its process group, then SIGKILL."""
        names = [name] if name else list(self.procs)
        for n in names:
            proc = self.procs.get(n)
            if proc is None or proc.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for n in names:
            proc = self.procs.pop(n, None)
            if proc is None:
                continue
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # Children (task supervisors, parsing processes) share the group: kill what is left.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def venv_python_ok(venv: str | Path) -> bool:
    return (Path(venv) / "bin" / "airflow").exists()


@contextlib.contextmanager
def private_redis(home: Path, *, port: int | None = None) -> Iterator[int]:
    """Run a ``redis-server`` of our own (on ``port``, or a free one; no persistence); yield its port."""
    if shutil.which("redis-server") is None:
        import pytest

        pytest.fail("redis-server is not installed; run .ci/services.sh")
    port = port or free_port()
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=(home / "redis.log").open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=home,
    )

    def ping() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")

    try:
        wait_for(ping, timeout=20, interval=0.2, what="private redis-server")
        yield port
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


# --- the stack --------------------------------------------------------------------------------------

#: What every test stack sets on top of AirflowEnv's isolation: a quick scheduler and Dag processor,
#: and quick Execution API retries. Benchmarks that compare against upstream defaults pass tuned=False.
#: The Dag processor sees a new Dag file within REFRESH_INTERVAL and re-parses a changed one (and
#: runs its callbacks) at once; a file unchanged since its parse is parsed again only after
#: MIN_FILE_PROCESS_INTERVAL (upstream: 30 s). No test needs that re-parse, which cost a stack of six
#: files some 3 s of CPU a minute, on a CI machine that is CPU-bound. The scheduler keeps upstream's
#: idle sleep (1 s): with 0.2 s an idle scheduler took 7.5 s of CPU a minute instead of 2.7, and whole
#: directories took more CPU for no less wall time (tests/aip122: 222 s of CPU in 228 s, against 196 s
#: in 209 s; tests/retry_rules: 110 s in 139 s, against 90 s in 145 s).
TUNED: dict[str, str] = {
    "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
    "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN": "0.05",
    "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX": "0.2",
}

#: Components started by ``Stack.start()`` unless told otherwise; the api-server first (tasks need the
#: Execution API).
DEFAULT_COMPONENTS = ("api-server", "dag-processor", "scheduler")
FINISHED = frozenset({"success", "failed"})


class Stack:
    """
    A private Airflow deployment: database, ``AIRFLOW_HOME``, ports and the components a test needs.

    Constructing it plans everything (home, ports, the database's name, the configuration:
    ``process_env()`` can configure an in-process Airflow before it is imported); ``start()`` (or
    ``with``) creates the database from the migrated template of ``venv``, copies the Dags and
    plugins, starts the ``components`` and waits for the api-server; ``stop()`` stops every process it
    started and drops the database.

    ``config`` is the stack's configuration (environment variables) on top of the isolation settings,
    ``TUNED`` (unless ``tuned=False``) and, with an api-server, its port, Execution API URL and JWT
    secret. ``executor="CeleryExecutor"`` runs a private ``redis-server`` as broker and result
    backend; Celery workers are started with ``start_worker()``. ``out_var`` names the environment
    variable(s) through which the Dags find ``stack.out``, the directory they record into.
    """

    def __init__(
        self,
        name: str,
        home: str | Path,
        *,
        venv: str | Path | None = None,
        components: Iterable[str] = DEFAULT_COMPONENTS,
        config: dict[str, str] | None = None,
        dags: Iterable[str | Path] = (),
        plugins: Iterable[str | Path] = (),
        executor: str = "LocalExecutor",
        backend: str = "postgresql",
        db_url: str | None = None,
        out_var: str | Iterable[str] = (),
        tuned: bool = True,
    ) -> None:
        self.name = name
        self.venv = Path(venv or sys.prefix).absolute()
        self.home = Path(home).absolute()
        self.out = self.home / "out"
        self.out.mkdir(parents=True, exist_ok=True)
        self.components = tuple(components)
        self.backend = backend
        self.executor = executor
        self._dags = [Path(p) for p in dags]
        self._plugins = [Path(p) for p in plugins]
        self._owns_db = db_url is None
        if db_url is not None:
            backend = "sqlite" if db_url.startswith("sqlite") else "postgresql"
            self.backend = backend
        else:
            if backend == "sqlite":
                db_url = f"sqlite:///{self.home / 'airflow.db'}"
            else:
                db_url = pg_url(f"{name}_{uuid.uuid4().hex[:8]}".lower())
        self.db_url = db_url
        self.api_port = free_port()
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        settings: dict[str, str] = {
            "AIRFLOW__CORE__EXECUTOR": executor,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": f"{name}-{uuid.uuid4().hex}{uuid.uuid4().hex}",
            **(TUNED if tuned else {}),
        }
        for var in [out_var] if isinstance(out_var, str) else out_var:
            settings[var] = str(self.out)
        self.redis_port: int | None = None
        if executor == "CeleryExecutor":
            self.redis_port = free_port()
            broker = f"redis://127.0.0.1:{self.redis_port}/0"
            settings |= {"AIRFLOW__CELERY__BROKER_URL": broker, "AIRFLOW__CELERY__RESULT_BACKEND": broker}
        settings.update(config or {})
        self.env = AirflowEnv(self.venv, self.home, db_url=self.db_url, extra_env=settings)
        self._exit = contextlib.ExitStack()
        self._started = False

    # -- configuration ----------------------------------------------------------------------------
    def process_env(self) -> dict[str, str]:
        """The settings that make an Airflow imported in another process (e.g. pytest's) use this stack."""
        return {k: v for k, v in self.env.env.items() if k.startswith("AIRFLOW") or k in self._out_vars()}

    def _out_vars(self) -> set[str]:
        return {k for k, v in self.env.env.items() if v == str(self.out)}

    @property
    def dags_folder(self) -> Path:
        return self.env.dags_folder

    # -- life cycle -------------------------------------------------------------------------------
    def start_component(self, *args: str, name: str | None = None, config: dict[str, str | None] | None = None):
        """Start one more component (``airflow <args>``) as ``name``, with ``config`` on top of the stack's.

        ``stack.start_component("scheduler", name="scheduler-ha", config={...})`` is a scheduler with a
        configuration of its own on the shared stack.
        """
        return self.env.start(*args, name=name, extra_env=config)

    def start(self) -> Self:
        """Create the database, copy the Dags and plugins, start the components, wait for the api-server."""
        if self._started:
            return self
        self._started = True
        try:
            self._create_database()
            for source in self._dags:
                if source.is_dir():
                    shutil.copytree(source, self.dags_folder, dirs_exist_ok=True)
                else:
                    shutil.copy(source, self.dags_folder)
            if self._plugins:
                (self.home / "plugins").mkdir(exist_ok=True)
            for source in self._plugins:
                if source.is_dir():
                    shutil.copytree(source, self.home / "plugins", dirs_exist_ok=True)
                else:
                    shutil.copy(source, self.home / "plugins")
            if self.redis_port is not None:
                self._exit.enter_context(private_redis(self.home, port=self.redis_port))
            for component in self.components:
                self.env.start(component)
            if "api-server" in self.components:
                self.wait_for(lambda: http_ok(f"{self.api_url}/execution/health"), timeout=180, what="the api-server")
        except BaseException:
            self.stop()
            raise
        return self

    def _create_database(self) -> None:
        if not self._owns_db:
            return
        if self.backend == "sqlite":
            shutil.copyfile(sqlite_template(self.venv), self.db_url.split(":///", 1)[1])
            return
        require_postgres()
        name = self.db_url.rsplit("/", 1)[1]
        pg_admin_execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template(self.venv)}"')
        self._exit.callback(pg_drop, name)

    def stop(self, name: str | None = None) -> None:
        """Stop one component, or everything (processes, then the private Redis and the database)."""
        if name is not None:
            self.env.stop(name)
            return
        self.env.stop()
        self._exit.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- Celery -----------------------------------------------------------------------------------
    def start_worker(self, name: str, *args: str) -> subprocess.Popen:
        """Start ``airflow celery worker --concurrency 1 <args>`` as ``name``."""
        return self.env.start("celery", "worker", "--concurrency", "1", *args, name=name)

    def redis(self):
        """A client of the stack's private Redis (broker and result backend)."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.redis_port)

    # -- waiting and diagnostics ------------------------------------------------------------------
    def log_text(self, name: str) -> str:
        return self.env.log_text(name)

    def log_tails(self, *names: str, chars: int = 6000) -> str:
        """The end of each named component's log (default: every component started)."""
        names = names or tuple(sorted({*self.env.procs, *self.components}))
        return "\n".join(f"==== {n} (last {chars} characters)\n{self.log_text(n)[-chars:]}" for n in names)

    def wait_for(self, predicate: Callable[[], Any], *, timeout: float, interval: float = 0.5, what: str = "",
                 logs: Iterable[str] = ()) -> Any:
        """:func:`wait_for`, printing the components' logs (``logs``, default all) if it times out."""
        try:
            return wait_for(predicate, timeout=timeout, interval=interval, what=what)
        except TimeoutError:
            print(self.log_tails(*logs))
            raise

    # -- the database -----------------------------------------------------------------------------
    def query(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        return query(self.db_url, sql, **params)

    def wait_parsed(self, *dag_ids: str, timeout: float = 120) -> None:
        """Wait until the Dag processor has written every one of ``dag_ids`` to the database."""
        wanted = set(dag_ids)

        def parsed() -> bool:
            return wanted <= {r["dag_id"] for r in self.query("SELECT dag_id FROM dag")}

        self.wait_for(parsed, timeout=timeout, what=f"the Dag processor to parse {sorted(wanted)}",
                      logs=("dag-processor",))

    def ti(self, dag_id: str, task_id: str | None = None, *, run_id: str | None = None) -> dict[str, Any] | None:
        """The live row of the one task instance matching ``dag_id`` (``task_id``, ``run_id``), or None."""
        rows = self.tries(dag_id, task_id, run_id=run_id, past=False)
        return rows[0] if len(rows) == 1 else None

    def tries(
        self, dag_id: str, task_id: str | None = None, *, run_id: str | None = None, past: bool = True,
        columns: str = "*",
    ) -> list[dict[str, Any]]:
        """Every try matching ``dag_id`` (``task_id``, ``run_id``): the archived ones, then the live rows."""
        import lines

        where = "WHERE dag_id = %(d)s" + (" AND task_id = %(t)s" if task_id else "")
        where += " AND run_id = %(r)s" if run_id else ""
        params = {"d": dag_id, "t": task_id, "r": run_id}
        sources = [lines.PAST_TRIES, lines.LIVE_TRIES] if past else [lines.LIVE_TRIES]
        return [
            row
            for source in sources
            for row in self.query(f"SELECT {columns} FROM {source} {where} ORDER BY task_id, map_index, try_number", **params)
        ]

    def wait_ti(self, dag_id: str, task_id: str | None, states: Iterable[str] = FINISHED, *, timeout: float,
                run_id: str | None = None) -> dict[str, Any]:
        """Wait until the live row of the task instance is in one of ``states``; return it."""
        states = set(states)
        return self.wait_for(
            lambda: (row := self.ti(dag_id, task_id, run_id=run_id)) and row["state"] in states and row,
            timeout=timeout,
            what=f"{dag_id}.{task_id or '*'} in {sorted(states)}",
        )

    # -- the Dags' records -------------------------------------------------------------------------
    def jsonl(self, name: str) -> list[dict[str, Any]]:
        """The records a Dag, plugin or callback wrote to ``stack.out / name``."""
        return read_jsonl(self.out / name)

    # -- REST API ----------------------------------------------------------------------------------
    def rest(self, method: str, path: str, **kwargs: Any):
        """One request to the public REST API (``/api/v2<path>``); an httpx response."""
        import httpx

        return httpx.request(method, f"{self.api_url}/api/v2{path}", timeout=30, **kwargs)

    def trigger(self, dag_id: str, *, run_id: str | None = None, conf: dict | None = None) -> str:
        """Trigger a manual run of ``dag_id`` once it is parsed; return its run_id.

        Through the REST API when the stack runs an api-server (quick), else with ``airflow dags trigger``.
        """
        run_id = run_id or f"manual__{dag_id}__{uuid.uuid4().hex[:8]}"
        self.wait_parsed(dag_id)
        if "api-server" in self.env.procs:
            body = {"dag_run_id": run_id, "logical_date": None, "conf": conf or {}}
            resp = self.rest("POST", f"/dags/{dag_id}/dagRuns", json=body)
            if resp.status_code != 200:
                raise RuntimeError(f"triggering {dag_id} failed ({resp.status_code}): {resp.text}")
        else:
            args = ["--run-id", run_id] + (["--conf", json.dumps(conf)] if conf else [])
            self.env.airflow("dags", "trigger", dag_id, *args, timeout=120)
        return run_id


__all__ = [
    "FINISHED",
    "AirflowEnv",
    "Stack",
    "StatsdReceiver",
    "backend_database",
    "free_port",
    "http_ok",
    "log_records",
    "migrated_database",
    "migrated_sqlite",
    "pg_available",
    "pg_database",
    "pg_url",
    "process_gone",
    "private_redis",
    "query",
    "read_jsonl",
    "require_postgres",
    "unpatched_venv",
    "venv_python_ok",
    "wait_for",
]


def unpatched_venv(path: str | Path | None = None, *, providers: bool = False, line: str | None = None) -> Path:
    """
    Return a venv with the unpatched upstream release of a line (``pstool.unpatched``).

    ``line`` is the release line (``"3.3"``: 3.3.2, ``"3.4"``: 3.4.0b2); by default the line this
    session tests (``PATCHSET_LINE``). With ``providers=True``, also every unpatched provider the
    patched build carries: the same distributions as the patched venv, for benchmarks that compare
    the two. Built once per machine (shared by every checkout, keyed by what it is built from) from
    the line's own pinned wheels, which it fetches itself. Never install into it.
    """
    repo = Path(__file__).resolve().parents[1]
    if str(repo / "dev") not in sys.path:
        sys.path.insert(0, str(repo / "dev"))
    from pstool.paths import DEFAULT_LINE
    from pstool.unpatched import unpatched_venv as build

    return build(line or os.environ.get("PATCHSET_LINE") or DEFAULT_LINE, providers=providers, path=Path(path) if path else None)
