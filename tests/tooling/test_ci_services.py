""".ci/services.sh: the two lines' ``make test`` run it side by side, so concurrent runs must all succeed.

Two ``ALTER USER postgres PASSWORD ...`` at once fail in PostgreSQL ("tuple concurrently updated"),
which ended a CI line before its first test. These tests run the real script against the machine's
PostgreSQL and Redis (they are up: every session starts them first).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.line_independent  # CI's own scripts, the same for every line

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "services.sh"


def start(lock: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PATCHSET_SERVICES_LOCKED"}
    env["PATCHSET_SERVICES_LOCK"] = str(lock)
    return subprocess.Popen(
        [shutil.which("bash") or "bash", str(SCRIPT)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_concurrent_runs_all_succeed(tmp_path: Path) -> None:
    """Three runs at once, twice over: each exits 0 and reports both services."""
    lock = tmp_path / "services.lock"
    for _ in range(2):
        runs = [start(lock) for _ in range(3)]
        outputs = [run.communicate(timeout=300)[0] for run in runs]
        for run, output in zip(runs, outputs, strict=True):
            assert run.returncode == 0, output
            assert "services: postgresql" in output, output
            assert "tuple concurrently updated" not in output


def test_a_run_waits_for_the_one_holding_the_lock(tmp_path: Path) -> None:
    """While another run holds the lock, a run does nothing; it finishes once the lock is released."""
    lock = tmp_path / "services.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        run = start(lock)
        # Longer than a whole run takes when everything is up (well under a second here).
        with pytest.raises(subprocess.TimeoutExpired):
            run.wait(timeout=5)
        fcntl.flock(held, fcntl.LOCK_UN)
    output = run.communicate(timeout=300)[0]
    assert run.returncode == 0, output
    assert "services: postgresql" in output, output
