"""The patched providers on an UNPATCHED 3.3.2 core: install exactly that combination in its own
venv (pinned upstream core/task-sdk wheels + the patched provider wheels from dist/) and run
test_compat_unpatched_core.py there, where it is not skipped: the providers import, detect that the
core has no failure-cause API, and report as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "upstream"
UNPATCHED = [
    "apache_airflow-3.3.2-py3-none-any.whl",
    "apache_airflow_core-3.3.2-py3-none-any.whl",
    "apache_airflow_task_sdk-1.3.2-py3-none-any.whl",
    "apache_airflow_providers_standard-1.21.0-py3-none-any.whl",
]


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_patched_providers_run_on_an_unpatched_core() -> None:
    providers = sorted((REPO / "dist").glob("apache_airflow_providers_*+ps.*-py3-none-any.whl"))
    assert [p.name.split("-")[0] for p in providers] == [
        "apache_airflow_providers_amazon",
        "apache_airflow_providers_celery",
        "apache_airflow_providers_cncf_kubernetes",
    ]
    venv = REPO / "build" / "compat-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "-c", str(REPO / "dev" / "constraints.txt"),
         *(str(CACHE / w) for w in UNPATCHED), *map(str, providers),
         "pytest", "pytest-timeout", "psycopg2-binary", "asyncpg", "redis"],
        check=True,
    )
    versions = subprocess.run(
        [str(python), "-c",
         "import importlib.metadata as m; print(m.version('apache-airflow-core'), "
         "m.version('apache-airflow-providers-celery'))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    assert versions == ["3.3.2", "3.26.0+ps.1"]
    proc = subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q",
         str(REPO / "tests" / "providers" / "test_compat_unpatched_core.py")],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "4 passed" in proc.stdout and "skipped" not in proc.stdout
