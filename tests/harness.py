"""Start and stop real Airflow components (scheduler, dag-processor, api-server) for end-to-end tests.

Every component runs as a subprocess of a given venv, in its own process group, with its own
``AIRFLOW_HOME``; its output goes to ``<home>/logs/<name>.log``. ``AirflowEnv.stop()`` (also run on
``__exit__``) kills every process group it started, so a failing test leaves nothing behind.

Typical use::

    with AirflowEnv(venv, tmp_path / "home", db_url=url, extra_env={...}) as env:
        env.airflow("db", "migrate")
        env.start("scheduler")
        env.start("dag-processor")
        wait_for(lambda: ..., timeout=60)
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

PG_ADMIN_URL = "postgresql+psycopg2://postgres:postgres@127.0.0.1:5432/postgres"


def pg_url(db: str) -> str:
    return f"postgresql+psycopg2://postgres:postgres@127.0.0.1:5432/{db}"


def pg_admin_execute(sql: str) -> None:
    """Run one statement as the PostgreSQL superuser on the ``postgres`` database (autocommit)."""
    import psycopg2

    conn = psycopg2.connect(
        host="127.0.0.1",
        port=5432,
        user="postgres",
        password="postgres",
        dbname="postgres",
    )
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def pg_available() -> bool:
    try:
        pg_admin_execute("SELECT 1")
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return False
    return True


@contextlib.contextmanager
def pg_database(prefix: str) -> Iterator[str]:
    """Create a fresh PostgreSQL database named ``<prefix>_<random>``; yield its SQLAlchemy URL; drop it."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}".lower()
    pg_admin_execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_url(name)
    finally:
        with contextlib.suppress(Exception):
            pg_admin_execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"
            )
            pg_admin_execute(f'DROP DATABASE IF EXISTS "{name}"')



@contextlib.contextmanager
def backend_database(backend: str, tmp_path: Path, prefix: str) -> Iterator[str]:
    """Yield the URL of a fresh database: a SQLite file in ``tmp_path``, or PostgreSQL ``<prefix>_<random>``.

    A migration test runs once per backend; PostgreSQL missing is a failure, not a skip.
    """
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'airflow.db'}"
        return
    if backend not in ("postgres", "postgresql"):
        raise ValueError(f"unknown database backend {backend!r} (sqlite or postgresql)")
    if not pg_available():
        import pytest

        pytest.fail("PostgreSQL at 127.0.0.1:5432 is not reachable; run .ci/services.sh")
    with pg_database(prefix) as url:
        yield url

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_isolated_script(script: str, home: Path, *, timeout: float = 100) -> Any:
    """
    Run ``script`` in a fresh interpreter with its own AIRFLOW_HOME and SQLite database.

    Airflow reads its configuration once per process, so code that needs a clean Airflow (an
    executor, the ORM) runs there. The script prints a JSON document as its last line; return it.
    """
    import json

    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
    )
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float,
    interval: float = 0.5,
    what: str = "",
) -> Any:
    """Poll ``predicate`` until it returns a truthy value (returned) or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as e:  # noqa: BLE001 - the DB may not be ready yet, etc.
            last_exc = e
            value = None
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(
        f"timed out after {timeout}s waiting for {what or predicate}"
    ) from last_exc


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
        self.venv = Path(venv)
        self.home = Path(home)
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

    def airflow(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess:
        """Run one ``airflow`` CLI command to completion."""
        proc = subprocess.run(
            [str(self.venv / "bin" / "airflow"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.home,
            check=False,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"airflow {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
            )
        return proc

    def run_python(
        self, code: str, *, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess:
        """Run a Python snippet with this environment's interpreter and settings."""
        proc = subprocess.run(
            [self.python, "-c", code],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.home,
            check=False,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"python snippet failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
            )
        return proc

    def start(self, *args: str, name: str | None = None) -> subprocess.Popen:
        """Start ``airflow <args>`` in the background, in a new process group."""
        name = name or args[0]
        log = (self.home / "logs" / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [str(self.venv / "bin" / "airflow"), *args],
            env=self.env,
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


__all__ = [
    "AirflowEnv",
    "free_port",
    "pg_available",
    "pg_database",
    "pg_url",
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
    the two. Built once per checkout under ``build/<line>/`` from the line's own pinned wheels,
    which it fetches itself.
    """
    repo = Path(__file__).resolve().parents[1]
    if str(repo / "dev") not in sys.path:
        sys.path.insert(0, str(repo / "dev"))
    from pstool.paths import DEFAULT_LINE
    from pstool.unpatched import unpatched_venv as build

    return build(line or os.environ.get("PATCHSET_LINE") or DEFAULT_LINE, providers=providers, path=Path(path) if path else None)
