"""dev/run_tests.py: the order the test directories run in, and PATCHSET_TEST_ORDER's checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.line_independent  # the suite runner, the same for every line

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

import run_tests


@pytest.fixture
def tests(tmp_path: Path) -> Path:
    """A tests/ tree: the default order's first directories, three more, and two that are not test directories."""
    for name in ("aip122", "tooling", "upstream_unit", "ui", "operations", "retry_rules"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "test_x.py").write_text("")
    (tmp_path / "no_tests").mkdir()
    (tmp_path / "no_tests" / "helper.py").write_text("")
    (tmp_path / "conftest.py").write_text("")
    return tmp_path


def names(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_the_default_order(tests: Path) -> None:
    # ORDER's directories as ORDER has them, then the others by name; a directory without test files is none.
    assert names(run_tests.directories(None, tests)) == [
        "tooling", "upstream_unit", "aip122", "operations", "retry_rules", "ui",
    ]
    assert names(run_tests.directories("", tests)) == names(run_tests.directories(None, tests))


def test_an_order_runs_its_directories_first_then_the_rest_in_the_default_order(tests: Path) -> None:
    assert names(run_tests.directories("retry_rules, tooling,ui", tests)) == [
        "retry_rules", "tooling", "ui", "upstream_unit", "aip122", "operations",
    ]


@pytest.mark.parametrize(
    ("order", "message"),
    [
        ("tooling,no_such_dir", "no test directory no_such_dir"),
        ("tooling,no_tests", "no test directory no_tests"),
        ("ui,tooling,ui", "ui named more than once"),
    ],
)
def test_a_bad_order_is_a_usage_error_naming_the_directory(tests: Path, order: str, message: str) -> None:
    with pytest.raises(run_tests.UsageError, match=message):
        run_tests.directories(order, tests)


def test_run_tests_refuses_a_bad_order_before_any_test_runs() -> None:
    env = {**os.environ, "PATCHSET_TEST_ORDER": "tooling,no_such_dir"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "dev" / "run_tests.py")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "PATCHSET_TEST_ORDER='tooling,no_such_dir': no test directory no_such_dir" in proc.stderr
    assert "===== tests/" not in proc.stdout


def test_ci_orders_every_directory_of_the_3_4_line() -> None:
    """.ci/run's order for the 3.4 line names real directories, each once (run_tests would refuse it)."""
    text = (REPO / ".ci" / "run").read_text()
    (line,) = [line for line in text.splitlines() if line.startswith("order34=")]
    order = line.split("=", 1)[1]
    assert names(run_tests.directories(order)) == [name.strip() for name in order.split(",")]
