"""pstool.image.build_lock: one image build at a time on the machine, across checkouts.

The container engine's image store is the machine's. CI's two clones (one per release line) each
build a stand-in on the one debootstrapped OS image in it, so their builds must wait for each other
even though each clone has a build directory of its own.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.line_independent  # pstool's own mechanics, the same for every line

REPO = Path(__file__).resolve().parents[2]
HOLD = (
    "import sys\n"
    "from pstool.image import build_lock\n"
    "with build_lock():\n"
    "    print('held', flush=True)\n"
    "    sys.stdin.readline()\n"
)


def checkout(root: Path) -> Path:
    """A checkout of pstool of its own (its ROOT, so its build directory, is ``root``)."""
    shutil.copytree(REPO / "dev" / "pstool", root / "dev" / "pstool", ignore=shutil.ignore_patterns("__pycache__"))
    return root / "dev"


def holder(dev: Path, cache: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(dev), "PATCHSET_MACHINE_CACHE": str(cache), "PATCHSET_LINES": str(REPO / "lines")}
    return subprocess.Popen(
        [sys.executable, "-c", HOLD], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def said_held(proc: subprocess.Popen[str], timeout: float) -> bool:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return bool(ready) and proc.stdout.readline().strip() == "held"


def test_two_checkouts_build_one_at_a_time(tmp_path: Path) -> None:
    cache = tmp_path / "machine-cache"
    first = holder(checkout(tmp_path / "clone-3.3"), cache)
    second = None
    try:
        assert said_held(first, 60), "the first build never took the lock"
        second = holder(checkout(tmp_path / "clone-3.4"), cache)
        assert not said_held(second, 3), "a second checkout built while the first one held the lock"
        first.communicate("\n", timeout=60)
        assert said_held(second, 60), "the second build did not start once the first one ended"
        second.communicate("\n", timeout=60)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert (cache / "image-build.lock").exists()
