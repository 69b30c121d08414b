"""Venvs of a line's *unpatched* upstream release, for tests and benchmarks that compare against it.

The venv holds the line's pinned wheels exactly as upstream released them (the meta-distribution,
core, task-sdk and the standard provider; with ``providers=True`` every pinned provider too),
the database drivers and StatsD client the tests use, resolved within the line's constraints.

It fetches the line's pinned files itself (``pstool.lock.fetch`` of the line's own lock), so it
works from a fresh clone whatever else was installed before. It lives under the line's build
directory (``build/<line>/unpatched-venv``), so a fresh clone builds its own rather than finding
one another checkout left behind; ``AIRFLOW_UNPATCHED_VENV`` / ``AIRFLOW_UNPATCHED_FULL_VENV`` name
another place. A file lock keeps concurrent builders (two test sessions) from colliding; a venv
that already answers with the line's release is reused.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from pstool import PatchsetError
from pstool.lock import fetch, load_lock
from pstool.paths import for_line

#: The distributions of the unpatched venv: what a plain ``pip install apache-airflow`` of the
#: release gives, plus the standard provider the example Dags use.
BASE_DISTRIBUTIONS = (
    "apache-airflow",
    "apache-airflow-core",
    "apache-airflow-task-sdk",
    "apache-airflow-providers-standard",
)
#: Drivers and clients the tests use against the unpatched release too (the [statsd] extra:
#: without it "StatsD on" silently sends nothing).
EXTRAS = ("psycopg2-binary", "asyncpg", "statsd")


def default_path(line: str, *, providers: bool = False) -> Path:
    variable = "AIRFLOW_UNPATCHED_FULL_VENV" if providers else "AIRFLOW_UNPATCHED_VENV"
    name = "unpatched-full-venv" if providers else "unpatched-venv"
    return Path(os.environ.get(variable) or for_line(line).build_dir / name)


def _works(venv: Path, release: str, providers: bool) -> bool:
    if not (venv / "bin" / "airflow").exists():
        return False
    probe = "import airflow, psycopg2, asyncpg, statsd; print(airflow.__version__)"
    if providers:
        probe += "; import airflow.providers.celery, airflow.providers.amazon, airflow.providers.cncf.kubernetes, redis"
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=False,
                          env=_clean_env())
    lines = proc.stdout.strip().splitlines()
    return proc.returncode == 0 and bool(lines) and lines[-1] == release


def _clean_env() -> dict[str, str]:
    """The caller's environment without its Airflow configuration.

    A test session that configures Airflow for itself (``tests/upstream_unit`` sets unit-test mode,
    which logs a line on import) must not make a working venv look broken, or a rebuild fail.
    """
    return {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k != "_IN_UNIT_TESTS"}


def unpatched_venv(line: str, *, providers: bool = False, path: Path | None = None) -> Path:
    """Return a working venv of ``line``'s unpatched release, building it (once) when needed."""
    where = for_line(line)
    lock = load_lock(where.lock_file)
    venv = Path(path) if path else default_path(line, providers=providers)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{venv}.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if _works(venv, lock.release, providers):
            return venv
        files = fetch(lock, quiet=True)
        names = [w.name for w in lock.wheels] if providers else list(BASE_DISTRIBUTIONS)
        wheels = [str(files[lock.wheel(name).file]) for name in names]
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        cmd = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
               *wheels, *EXTRAS, *(("redis",) if providers else ()), "-c", str(where.constraints)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=_clean_env())
        if proc.returncode != 0 or not _works(venv, lock.release, providers):
            raise PatchsetError(
                f"could not build the unpatched {lock.release} venv at {venv}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            )
    return venv
