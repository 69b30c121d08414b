"""Project-wide pytest settings: markers and the location of the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: end-to-end test with real Airflow processes (slow)")
    config.addinivalue_line("markers", "postgres: needs the PostgreSQL server from .ci/services.sh")
