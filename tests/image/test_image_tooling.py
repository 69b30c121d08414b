"""The image tooling's decisions, without a container: which base, which wheels, what to install.

``docker/patchset.py`` (run inside the image build) decides per patched wheel against the base's
installed versions; ``pstool.image`` picks the base and refuses the wrong wheels. The container tests
(test_image_build_e2e.py) run the same code in real builds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

from pstool import PatchsetError  # noqa: E402
from pstool import image as pstool_image  # noqa: E402


def load_patchset():
    return pstool_image.installer()


def fake_wheel(directory: Path, name: str, version: str) -> Path:
    """A wheel that has only the METADATA the tooling reads."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        info = f"{name.replace('-', '_')}-{version}.dist-info"
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nText: no\n")
    return path


BASE = {
    "apache-airflow-core": ("apache-airflow-core", "3.3.2"),
    "apache-airflow-task-sdk": ("apache-airflow-task-sdk", "1.3.2"),
    "apache-airflow-providers-celery": ("apache-airflow-providers-celery", "3.25.0"),
    "apache-airflow-providers-amazon": ("apache-airflow-providers-amazon", "9.40.0"),
}


def test_same_upstream_versions_are_installed_and_provider_changes_need_asking(tmp_path):
    patchset = load_patchset()
    wheels = [
        fake_wheel(tmp_path, "apache-airflow-core", "3.3.2+ps.1"),
        fake_wheel(tmp_path, "apache-airflow-providers-celery", "3.26.0+ps.1"),
        fake_wheel(tmp_path, "apache-airflow-providers-amazon", "9.39.0+ps.1"),
        fake_wheel(tmp_path, "apache-airflow-providers-cncf-kubernetes", "10.25.0+ps.1"),
    ]
    steps, refusals = patchset.plan(wheels, BASE, set())
    assert [(s["name"], s["change"]) for s in steps] == [("apache-airflow-core", "same upstream version")]
    assert len(refusals) == 3
    amazon, celery, kubernetes = sorted(refusals)
    # Each refusal names both versions and the build argument that allows the change.
    assert "has 3.25.0" in celery and "3.26.0+ps.1" in celery and "PATCHSET_PROVIDER_CHANGES=upgrade" in celery
    assert "has 9.40.0" in amazon and "9.39.0+ps.1" in amazon and "PATCHSET_PROVIDER_CHANGES=downgrade" in amazon
    assert "does not have it" in kubernetes and "10.25.0+ps.1" in kubernetes and "=upgrade" in kubernetes

    steps, refusals = patchset.plan(wheels, BASE, {"upgrade"})
    assert {s["name"]: s["change"] for s in steps} == {
        "apache-airflow-core": "same upstream version",
        "apache-airflow-providers-celery": "upgrade",
        "apache-airflow-providers-cncf-kubernetes": "upgrade",
    }
    assert len(refusals) == 1 and "9.40.0" in refusals[0]
    steps, refusals = patchset.plan(wheels, BASE, {"upgrade", "downgrade"})
    assert refusals == [] and len(steps) == 4


def test_core_of_another_release_is_refused_whatever_is_allowed(tmp_path):
    patchset = load_patchset()
    wheels = [fake_wheel(tmp_path, "apache-airflow-core", "3.4.0b2+ps.1")]
    steps, refusals = patchset.plan(wheels, BASE, {"upgrade", "downgrade"})
    assert steps == []
    assert refusals and "has 3.3.2" in refusals[0] and "3.4.0b2+ps.1" in refusals[0]


def test_a_patched_image_rebuilt_on_itself_reinstalls_the_same_version(tmp_path):
    patchset = load_patchset()
    wheels = [fake_wheel(tmp_path, "apache-airflow-core", "3.3.2+ps.1")]
    base = {"apache-airflow-core": ("apache-airflow-core", "3.3.2+ps.1")}
    steps, refusals = patchset.plan(wheels, base, set())
    assert refusals == [] and steps[0]["change"] == "same upstream version"


def test_check_names_each_lost_patched_distribution(tmp_path, capsys):
    patchset = load_patchset()
    constraints = tmp_path / "patchset-constraints.txt"
    constraints.write_text("# comment\nno-such-dist-for-this-test==1.0+ps.1\npip==0.0.1+ps.1\n")
    assert patchset.main(["check", "--constraints", str(constraints)]) == 1
    err = capsys.readouterr().err
    assert "no-such-dist-for-this-test: not installed (the patch set's is 1.0+ps.1)" in err
    assert "pip: " in err and "(the patch set's is 0.0.1+ps.1)" in err


def test_official_base_exists_for_finals_and_candidates_only():
    assert pstool_image.official_base("3.3.2") == "apache/airflow:3.3.2-python3.12"
    assert pstool_image.official_base("3.4.0rc1") == "apache/airflow:3.4.0rc1-python3.12"
    assert pstool_image.official_base("3.4.0b2") is None


def test_podman_gets_qualified_names():
    assert pstool_image._qualified("apache/airflow:3.3.2-python3.12") == "docker.io/apache/airflow:3.3.2-python3.12"
    assert pstool_image._qualified("localhost/airflow-standin:3.3.2") == "localhost/airflow-standin:3.3.2"
    assert pstool_image._qualified("quay.io/x/y:1") == "quay.io/x/y:1"


def pstool(*args: str, line: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PATCHSET_LINE": line, "PYTHONPATH": str(REPO / "dev"), **env}
    return subprocess.run(
        [sys.executable, "-m", "pstool", *args], cwd=REPO, env=environ, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_beta_line_without_a_base_is_refused_before_anything_is_built(unreleased_lines):
    proc = pstool("image", line="3.4", PATCHSET_LINES=str(unreleased_lines))
    assert proc.returncode == 1
    assert "upstream publishes no official image" in proc.stderr
    assert "make base-image LINE=3.4 && make image LINE=3.4 BASE=localhost/airflow-standin:3.4.0b2" in proc.stderr


def test_wheels_of_another_line_are_refused(tmp_path, monkeypatch):
    fake_wheel(tmp_path, "apache-airflow-core", "9.9.9+ps.1")
    monkeypatch.setenv("PATCHSET_DIST", str(tmp_path))
    lock = pstool_image.load_lock()
    with pytest.raises(PatchsetError, match=r"apache-airflow-core 9\.9\.9\+ps\.1, but the .* line pins"):
        pstool_image.patched_wheels(lock, pstool_image.local_version_label())


def test_the_stand_in_replaces_only_the_listed_pins():
    text = pstool_image.standin_constraints()
    pins = [line for line in text.splitlines() if line and not line.startswith("#")]
    names = [line.split("==")[0].lower() for line in pins]
    assert names.count("soupsieve") == 1 and "soupsieve==2.10" in pins
    base = [line for line in pstool_image._constraints().read_text().splitlines() if line and not line.startswith("#")]
    assert len(pins) == len(base)


def test_debian_mirror_comes_from_apt():
    mirror, _security = pstool_image.debian_mirrors()
    assert mirror.startswith(("http://", "https://")) and not mirror.endswith("/")
