"""Venvs of a line's *unpatched* upstream release, for tests and benchmarks that compare against it.

The venv holds the line's pinned wheels exactly as upstream released them (the meta-distribution,
core, task-sdk and the standard provider; with ``providers=True`` every pinned provider too, and
pytest, which ``tests/upstream_unit`` runs upstream's own tests with), the database drivers and
StatsD client the tests use, resolved within the line's constraints.

It is a cache of the machine, not of a checkout: it holds nothing this repository builds, only
pinned upstream files, so every checkout and every CI clone on the machine can share it. It lives
under :func:`pstool.paths.machine_cache_dir` (``~/.cache/airflow-patchset/unpatched/``), named by a
key over everything it is built from (the line, the Python that runs it, each wheel's pinned
sha256, the extra requirements and the line's constraints file): a change to any of them builds
another venv, and a venv is reused only when it carries the stamp of its key, written once the
install has finished and the venv answers with the line's release (a build killed half-way is never
reused; it is rebuilt from scratch). To build one, it fetches the line's pinned files itself
(``pstool.lock.fetch`` of the line's own lock), so it works from a fresh clone on a fresh machine.
``AIRFLOW_UNPATCHED_VENV`` / ``AIRFLOW_UNPATCHED_FULL_VENV`` name another place. A file lock keeps
concurrent builders (two test sessions, two CI clones) from colliding. A venv of another key that
nothing has used for :data:`PRUNE_AFTER_DAYS` days is removed when a new one is built.

Nothing may install into these venvs: they are shared. A test that needs more builds its own.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pstool import PatchsetError
from pstool.lock import Lock, fetch, load_lock, sha256_of
from pstool.paths import for_line, machine_cache_dir

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
#: What the venv with every provider adds: the Celery broker's client, and the test runner
#: ``tests/upstream_unit`` runs upstream's tests with (so that no test installs into a shared venv).
FULL_EXTRAS = ("redis", "pytest", "pytest-timeout")
#: The file in the venv that says which key it was built for, written once it works.
STAMP = ".patchset-unpatched.json"
#: A venv of an outdated key is removed once nothing has used it for this long.
PRUNE_AFTER_DAYS = 7


def build_key(line: str, lock: Lock, constraints: Path, *, providers: bool) -> dict:
    """Everything the venv is built from; any change to it means another venv."""
    names = [w.name for w in lock.wheels] if providers else list(BASE_DISTRIBUTIONS)
    return {
        "line": line,
        "release": lock.release,
        "python": sys.version,
        "wheels": {lock.wheel(name).file: lock.wheel(name).sha256 for name in names},
        "requirements": [*EXTRAS, *(FULL_EXTRAS if providers else ())],
        "constraints": sha256_of(constraints),
    }


def _kind(line: str, providers: bool) -> str:
    return f"{line}-{'full' if providers else 'base'}"


def named_venv(providers: bool) -> Path | None:
    """The venv ``AIRFLOW_UNPATCHED_VENV`` (``AIRFLOW_UNPATCHED_FULL_VENV`` with the providers) names, if any."""
    value = os.environ.get("AIRFLOW_UNPATCHED_FULL_VENV" if providers else "AIRFLOW_UNPATCHED_VENV")
    return Path(value) if value else None


def default_path(line: str, *, providers: bool = False, key: dict | None = None) -> Path:
    """``AIRFLOW_UNPATCHED_(FULL_)VENV``, else the machine cache's venv of ``key`` (default: the
    line's current one)."""
    named = named_venv(providers)
    if named:
        return named
    if key is None:
        where = for_line(line)
        key = build_key(line, load_lock(where.lock_file), where.constraints, providers=providers)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return machine_cache_dir() / "unpatched" / f"{_kind(line, providers)}-{digest}"


def _stamped(venv: Path, key: dict) -> bool:
    try:
        return json.loads((venv / STAMP).read_text()) == key
    except (OSError, ValueError):
        return False


def _prune(venv: Path, kind: str) -> None:
    """Remove the venvs of other keys of the same kind that nothing has used for a while."""
    cutoff = time.time() - PRUNE_AFTER_DAYS * 86400
    for other in venv.parent.glob(f"{kind}-*"):
        if other == venv or not other.is_dir():
            continue
        stamp = other / STAMP
        used = stamp.stat().st_mtime if stamp.exists() else other.stat().st_mtime
        if used < cutoff:
            shutil.rmtree(other, ignore_errors=True)
            Path(f"{other}.lock").unlink(missing_ok=True)


def _works(venv: Path, release: str, providers: bool) -> bool:
    if not (venv / "bin" / "airflow").exists():
        return False
    probe = "import airflow, psycopg2, asyncpg, statsd; print(airflow.__version__)"
    if providers:
        probe += (
            "; import airflow.providers.celery, airflow.providers.amazon, airflow.providers.cncf.kubernetes, redis"
            ", pytest, pytest_timeout"
        )
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
    key = build_key(line, lock, where.constraints, providers=providers)
    named = Path(path) if path else named_venv(providers)
    venv = named or default_path(line, providers=providers, key=key)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{venv}.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        # A venv someone named is theirs: reused whenever it works. The cache's only with its stamp.
        if (named or _stamped(venv, key)) and _works(venv, lock.release, providers):
            if not named:
                os.utime(venv / STAMP)  # in use: not pruned
            return venv
        files = fetch(lock, quiet=True)
        wheels = [str(files[file]) for file in key["wheels"]]
        (venv / STAMP).unlink(missing_ok=True)  # no stamp until the new build works
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        cmd = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
               *wheels, *key["requirements"], "-c", str(where.constraints)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=_clean_env())
        if proc.returncode != 0 or not _works(venv, lock.release, providers):
            raise PatchsetError(
                f"could not build the unpatched {lock.release} venv at {venv}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            )
        (venv / STAMP).write_text(json.dumps(key, indent=1, sort_keys=True))
    if not named:
        _prune(venv, _kind(line, providers))
    return venv
