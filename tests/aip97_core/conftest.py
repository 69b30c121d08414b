"""Fixtures for the AIP-97 core/scheduler tests.

Airflow components run as subprocesses (see ``tests/harness.py``) with their own AIRFLOW_HOME and
database, so these tests do not depend on the environment of the pytest process. The patched
Airflow is the one installed in the venv running pytest; the unpatched venv of the line (3.3.2, or
3.4.0b2 on the 3.4 line) is built on first use from the line's pinned wheels.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

import harness

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"


@pytest.fixture(scope="session")
def patched_venv() -> Path:
    """The venv running pytest, which holds the patched wheels."""
    return Path(sys.prefix)


@pytest.fixture(scope="session")
def unpatched_venv() -> Path:
    return harness.unpatched_venv()  # the unpatched release of this session's line
