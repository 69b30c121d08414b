"""
The patched providers of THIS checkout on an UNPATCHED core of this release line (3.3.2, or 3.4.0b2).

A venv (``build/compat-venv``; ``build/3.4/compat-venv`` on the 3.4 line) is a copy of the machine's
unpatched venv of the line with every pinned provider (``pstool.unpatched``: the line's pinned
upstream wheels as released, their dependencies, the test tools), copied again only when that venv
is another build (see ``compat_venv.py``). The line's provider wheels (``dist/<line>/``) are then
force-reinstalled on every run, checked file by file against the wheels, so the venv runs exactly
the code this checkout built (their version, ``X+ps.N``, changes only with a release, so a plain ``pip install``
would keep an earlier build), and ``pip check`` shows that the unpatched venv holds what they need.

Every provider test module that claims to cover the unpatched core (``COVERS_UNPATCHED_CORE =
True``) runs there, in one pytest session, with the real components of this directory (the
Kubernetes watch stream, the ECS Stubber, Redis, PostgreSQL). Only tests that need the AIP-97 core
to record a cause may be skipped, with a reason that says so.
"""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import harness
import pytest
from compat_venv import copy_base, install_current, venv_python
from pstool.lock import load_lock, local_version
from pstool.paths import BUILD_DIR, DIST_DIR
from pstool.unpatched import STAMP

pytestmark = pytest.mark.requires_feature("aip-97-cncf-kubernetes", "aip-97-amazon", "aip-97-celery")

HERE = Path(__file__).parent
REPO = HERE.parents[1]
LOCK = load_lock()  # this line's pins: the unpatched core is the release the line's series applies to
CLAIM = re.compile(r"^COVERS_UNPATCHED_CORE = True$", re.MULTILINE)
PATCHED_CORE_ONLY = "needs the AIP-97 core"


def modules_covering_the_unpatched_core() -> list[Path]:
    return sorted(p for p in HERE.glob("test_*.py") if CLAIM.search(p.read_text()))


def test_the_claiming_modules_are_the_provider_modules():
    """A provider module that asserts old-core behaviour must claim it, or it never runs there."""
    assert [p.name for p in modules_covering_the_unpatched_core()] == [
        "test_celery_failure_cause.py",
        "test_compat_unpatched_core.py",
        "test_ecs_failure_cause.py",
        "test_executor_subclass_compat.py",
        "test_k8s_failure_cause.py",
    ]


@pytest.mark.e2e
@pytest.mark.timeout(1500)
def test_patched_providers_run_on_an_unpatched_core(tmp_path) -> None:
    providers = sorted(DIST_DIR.glob("apache_airflow_providers_*+ps.*-py3-none-any.whl"))
    assert [p.name.split("-")[0] for p in providers] == [
        "apache_airflow_providers_amazon",
        "apache_airflow_providers_celery",
        "apache_airflow_providers_cncf_kubernetes",
    ]
    venv = BUILD_DIR / "compat-venv"  # one per line: both lines' suites may run at once
    copy_base(venv, harness.unpatched_venv(providers=True), stamp=STAMP)
    install_current(venv, providers)  # this checkout's build, checked byte for byte
    python = str(venv_python(venv))
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    versions = subprocess.run(
        [
            python,
            "-c",
            "import importlib.metadata as m; print(m.version('apache-airflow-core'), "
            "m.version('apache-airflow-providers-celery'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert versions == [
        LOCK.wheel("apache-airflow-core").version,
        LOCK.wheel("apache-airflow-providers-celery").version + "+" + local_version(),
    ]

    modules = modules_covering_the_unpatched_core()
    report = tmp_path / "report.xml"
    proc = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
            f"--junitxml={report}",
            *map(str, modules),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]

    ran: dict[str, int] = {}
    for case in ET.parse(report).iter("testcase"):
        module = case.get("classname", "").split(".")[-1]
        skipped = case.find("skipped")
        if skipped is not None:
            assert PATCHED_CORE_ONLY in (skipped.get("message") or ""), (case.get("name"), skipped.attrib)
            continue
        ran[module] = ran.get(module, 0) + 1
    # Every claiming module ran tests on the old core, the compatibility contract included.
    assert sorted(ran) == sorted(p.stem for p in modules), ran
    assert ran["test_compat_unpatched_core"] == 4
