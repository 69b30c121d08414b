"""dev/ci_times.py: the table .ci/run ends with (each test directory's wall time per line, the run's total)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "dev" / "ci_times.py"

LOG_33 = """\
release line 3.3: /x/.venv/bin/python
===== tests/tooling =====
..........
----- tests/tooling: 70 passed, 0 failed, 0 skipped, 0 errors in 301s
===== tests/aip122 =====
----- tests/aip122: 44 passed, 0 failed, 0 skipped, 0 errors in 412s (390s CPU)
    ----- tests/not_a_directory_line: in 9s

suite took 12.0 min
"""
LOG_34 = """\
----- tests/aip122: 43 passed, 1 failed, 0 skipped, 0 errors in 398s (401s CPU)
----- tests/ui: 9 passed, 0 failed, 0 skipped, 0 errors in 238s (150s CPU)
suite took 6.9 min
make test took 701s
"""


def test_table_of_directory_times_per_line_and_the_total(tmp_path: Path) -> None:
    (tmp_path / "3.3.log").write_text(LOG_33)
    (tmp_path / "3.4.log").write_text(LOG_34)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--total-seconds", "2250", f"3.3={tmp_path / '3.3.log'}", f"3.4={tmp_path / '3.4.log'}"],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line.split() for line in proc.stdout.splitlines()]
    assert ["directory", "3.3", "3.4"] in rows
    assert ["tooling", "301", "-"] in rows  # run on the default line only
    assert ["aip122", "412", "398"] in rows
    assert ["suite", "(run_tests.py)", "720", "414"] in rows
    # The line's whole chain, where .ci/run appended it (3.3's log has none).
    assert ["make", "test", "(install+suite)", "-", "701"] in rows
    assert not any("not_a_directory_line" in line for line in proc.stdout.splitlines())
    wall, _, cpu = proc.stdout.partition("test directory CPU time")
    assert wall.splitlines()[-1] == "run total (.ci/run, both lines side by side): 37.5 min"
    # CPU where the log has it (tooling's line predates it), and each line's sum.
    cpu_rows = [line.split() for line in cpu.splitlines()]
    assert ["aip122", "390", "401"] in cpu_rows
    assert ["ui", "-", "150"] in cpu_rows
    assert ["tooling", "-", "-"] not in cpu_rows and not any(r and r[0] == "tooling" for r in cpu_rows)
    assert ["all", "directories", "390", "551"] in cpu_rows


def test_a_line_that_never_reached_its_suite_shows_dashes(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), f"3.3={tmp_path / 'missing.log'}"], capture_output=True, text=True, check=True
    )
    assert ["suite", "(run_tests.py)", "-"] in [line.split() for line in proc.stdout.splitlines()]
