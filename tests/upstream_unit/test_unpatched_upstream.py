"""
Every unit test the series adds fails without the series: run them on pristine upstream.

The tree's test files are run, through this same shim, in a venv holding only the line's pinned
upstream wheels (on the 3.3 line apache-airflow-core 3.3.2, task-sdk 1.3.2 and the providers, unpatched). There, no test may
pass: each either fails to import what only its patch adds or fails an assertion.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest
from tree_tests import TREE, tree_test_files

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def unpatched_python() -> Path:
    """The line's unpatched release with every pinned provider, and pytest (``pstool.unpatched``: the
    machine's shared venv, built from the line's own pinned wheels; nothing installs into it)."""
    from pstool.paths import LINE
    from pstool.unpatched import unpatched_venv

    return unpatched_venv(LINE, providers=True) / "bin" / "python"


def _outcomes(report: Path) -> dict[str, list[str]]:
    """{tree test file: [outcome of each test case]} from a junit report."""
    found: dict[str, list[str]] = defaultdict(list)
    for case in ET.parse(report).getroot().iter("testcase"):
        classname = case.get("classname", "")
        # A collection error is reported with an empty classname and the module as its name.
        qualified = ".".join(p for p in (classname, case.get("name", "")) if p)
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
        for path in tree_test_files():
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            if module in (classname, qualified) or classname.startswith(module + "."):
                found[str(path.relative_to(TREE))].append(outcome)
    return found


@pytest.mark.e2e
@pytest.mark.timeout(1200)
def test_no_tree_test_passes_on_unpatched_upstream(tmp_path: Path) -> None:
    files = tree_test_files()
    assert files, "the series adds no unit tests"
    python = unpatched_python()
    version = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('apache-airflow-core'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    from pstool.lock import load_lock

    assert version == load_lock().release
    report = tmp_path / "report.xml"
    proc = subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-o", "addopts=",
         "--continue-on-collection-errors",
         f"--junitxml={report}", str(HERE),
         "--ignore", str(HERE / "test_shim.py"), "--ignore", str(Path(__file__))],
        capture_output=True, text=True, cwd=REPO, timeout=1100, check=False,
    )
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    outcomes = _outcomes(report)
    passed = {f: o.count("passed") for f, o in outcomes.items() if "passed" in o}
    assert not passed, f"tests that pass without the series: {passed}\n{proc.stdout[-3000:]}"
    # A file whose import fails is reported as one collection error; every file must show up.
    missing = [str(f.relative_to(TREE)) for f in files if str(f.relative_to(TREE)) not in outcomes]
    assert not missing, f"tree test files that did not run at all: {missing}\n{proc.stdout[-3000:]}"
