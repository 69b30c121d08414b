"""The repository itself: nothing a merge left behind, and the Makefile parses."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.line_independent
MARKER = re.compile(rb"^(<<<<<<< |>>>>>>> |=======$)", re.MULTILINE)


def test_no_tracked_file_holds_a_merge_conflict_marker() -> None:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    # Patch files carry upstream's text, where such lines could legitimately appear as context.
    found = [
        name.decode()
        for name in tracked
        if name and not name.endswith(b".patch") and (REPO / name.decode()).is_file()
        and MARKER.search((REPO / name.decode()).read_bytes())
    ]
    assert found == []


def test_the_makefile_parses_and_lists_its_targets() -> None:
    proc = subprocess.run(["make", "-n", "help"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
