"""The stand-in base and the patched image, built with the project's own commands and looked into.

``make base-image`` / ``make image BASE=localhost/airflow-standin:<release>`` (the session fixtures,
pstool.image) build them; these tests run the images and build on them:

* the stand-in has the official image's layout and runs Airflow commands through its entrypoint; a
  second ``base-image`` only compares the key of its inputs;
* the patched image carries every patched wheel at its ``+ps.N`` version, changes nothing else of the
  base, ships ``patchset-constraints.txt``, and passes ``pip check``;
* on a base whose celery provider is older (3.25.0, from PyPI), the build is refused naming both
  versions, and succeeds with ``PROVIDER_CHANGES=upgrade`` (nothing else changes; ``pip check``);
* the Dockerfile of docs/image.md "Extending the image" keeps the patches; an install that does not
  follow it replaces a patched provider, and ``airflow-patchset check`` says so;
* the build context is only ``docker/`` and the patched wheels (.dockerignore).

The line-independent ones run on the default line only (the tooling is the same code on every line).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))
sys.path.insert(0, str(REPO / "tests"))

from pstool.build import dist_dir  # noqa: E402
from pstool.image import (  # noqa: E402
    KEY_LABEL,
    LABEL_PREFIX,
    OS_REPOSITORY,
    SUITE,
    build_secrets,
    pip_ca_bundle,
)
from pstool.lock import load_lock, local_version  # noqa: E402
from pstool.paths import PATCHES_DIR  # noqa: E402
from pstool.releases import series_hash  # noqa: E402

import lines  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

default_line_only = pytest.mark.skipif(
    lines.LINE != lines.DEFAULT_LINE,
    reason="the image tooling is the same code on every line: checked on the default line",
)

VERSIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.version for d in m.distributions()}))"
)


def run(engine, image: str, *command: str) -> subprocess.CompletedProcess:
    """``IMAGE COMMAND`` through the image's entrypoint (no database to wait for)."""
    return engine.run("run", "--rm", "--env", "CONNECTION_CHECK_MAX_COUNT=0", image, *command, check=False, timeout=300)


def versions(engine, image: str) -> dict[str, str]:
    proc = run(engine, image, "python", "-c", VERSIONS)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def patched_versions() -> dict[str, str]:
    from pstool.image import _wheel_metadata

    return {
        name.lower(): version for name, version in (_wheel_metadata(p) for p in sorted(dist_dir().glob("*.whl")))
    }


def build(engine, containerfile: str, tag: str, context: Path) -> subprocess.CompletedProcess:
    (context / "Containerfile").write_text(containerfile)
    return engine.run(
        "build", "--network=host", *build_secrets(), "--file", str(context / "Containerfile"), "--tag", tag,
        str(context), check=False, timeout=900,
    )


def pstool(*args: str, **extra_env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "dev"), "PATCHSET_LINE": lines.LINE, **extra_env}
    return subprocess.run(
        [sys.executable, "-m", "pstool", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False
    )


def test_the_stand_in_has_the_official_layout_and_entrypoint(engine, standin):
    lock = load_lock()
    proc = run(
        engine, standin, "bash", "-c",
        'id -u; id -g; echo "$AIRFLOW_HOME"; echo "$HOME"; python -c "import sys; print(sys.prefix)"; '
        'command -v airflow; tr "\\0" " " < /proc/1/cmdline; echo; echo "$AIRFLOW_VERSION"',
    )
    assert proc.returncode == 0, proc.stderr
    uid, gid, home, user_home, prefix, airflow, init, version = proc.stdout.strip().splitlines()
    assert (uid, gid, home, user_home) == ("50000", "0", "/opt/airflow", "/home/airflow")
    assert prefix == "/home/airflow/.local" and airflow == "/home/airflow/.local/bin/airflow"
    assert init.startswith("/usr/bin/dumb-init -- /entrypoint"), init
    assert version == lock.release
    # The entrypoint runs Airflow commands, with or without the leading "airflow".
    for command in (["version"], ["airflow", "version"]):
        proc = run(engine, standin, *command)
        assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == lock.release, proc.stderr
    # The line's pinned, unpatched wheels, and a consistent set.
    installed = versions(engine, standin)
    for pinned in lock.wheels:
        assert installed[pinned.name] == pinned.version, pinned.name
    assert run(engine, standin, "python", "-m", "pip", "check").returncode == 0


def test_a_second_base_image_only_compares_its_inputs(engine, standin):
    before = engine.inspect(standin)["Id"]
    proc = pstool("base-image")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{standin} is up to date" in proc.stdout
    assert engine.inspect(standin)["Id"] == before
    assert engine.labels(standin)[KEY_LABEL]


def test_the_patched_image_carries_the_patch_set_and_nothing_else_changes(engine, standin, patched):
    lock = load_lock()
    wanted = patched_versions()
    assert wanted and all("+ps." in v for v in wanted.values())
    base, image = versions(engine, standin), versions(engine, patched)
    assert {name: image[name] for name in wanted} == wanted
    assert {n: v for n, v in image.items() if n not in wanted} == {n: v for n, v in base.items() if n not in wanted}
    proc = run(engine, patched, "bash", "-c", "cat ~/patchset-constraints.txt && airflow-patchset check && pip check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pins = dict(line.lower().split("==") for line in proc.stdout.splitlines() if "==" in line and "ok " not in line)
    assert pins == wanted
    proc = run(engine, patched, "python", "-c", "import importlib.metadata as m; print(m.distribution('apache-airflow-core').read_text('patchset.json'))")
    manifest = json.loads(proc.stdout)
    assert manifest["upstream_version"] == lock.release and manifest["patches"]
    labels = engine.labels(patched)
    assert labels[f"{LABEL_PREFIX}release"] == lock.release and labels[f"{LABEL_PREFIX}line"] == lines.LINE
    assert labels[f"{LABEL_PREFIX}base"] == standin
    # The image names its release: label, commit and series hash, as labels and in airflow-patchset check.
    assert labels[f"{LABEL_PREFIX}local-version"] == local_version()
    assert labels[f"{LABEL_PREFIX}series-hash"] == series_hash(PATCHES_DIR)
    out = run(engine, patched, "bash", "-c", "airflow-patchset check").stdout
    assert [line for line in out.splitlines() if line.startswith("patch set ")] == [
        f"patch set {local_version()} (line {lines.LINE}), commit {labels[f'{LABEL_PREFIX}commit']}, "
        f"series {series_hash(PATCHES_DIR)}"
    ], out
    assert run(engine, patched, "version").stdout.strip().splitlines()[-1] == lock.release


@pytest.fixture(scope="module")
def older_celery_base(engine, standin, tmp_path_factory) -> str:
    """The stand-in with the celery provider one release older (3.25.0) than the patch set's."""
    tag = f"localhost/airflow-patchset-test:{load_lock().release}-celery-3.25.0"
    containerfile = f"""FROM {standin}
RUN --mount=type=secret,id=pip-ca,uid=50000,mode=0444 \\
    if [ -r /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \\
 && grep -v '^apache-airflow-providers-celery==' /home/airflow/constraints.txt > /tmp/keep.txt \\
 && pip install --no-input --disable-pip-version-check --constraint /tmp/keep.txt apache-airflow-providers-celery==3.25.0 \\
 && rm /tmp/keep.txt
"""
    proc = build(engine, containerfile, tag, tmp_path_factory.mktemp("older-celery"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tag


@default_line_only
def test_a_provider_of_another_version_is_refused_unless_the_upgrade_is_asked_for(engine, older_celery_base, unreleased_lines):
    base = versions(engine, older_celery_base)
    assert base["apache-airflow-providers-celery"] == "3.25.0"
    wanted = patched_versions()
    refused = f"localhost/airflow-patchset-test:refused-{uuid.uuid4().hex[:6]}"
    unreleased = {"PATCHSET_LINES": str(unreleased_lines)}
    proc = pstool("image", "--no-wheels", "--base", older_celery_base, "--tag", refused, **unreleased)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]
    assert (
        "apache-airflow-providers-celery: the base image has 3.25.0, the patch set's is "
        f"{wanted['apache-airflow-providers-celery']} (a provider upgrade)" in output
    ), output[-3000:]
    assert "PATCHSET_PROVIDER_CHANGES=upgrade" in output
    assert not engine.exists(refused)

    upgraded = f"localhost/airflow-patchset-test:upgraded-{uuid.uuid4().hex[:6]}"
    try:
        proc = pstool(
            "image", "--no-wheels", "--base", older_celery_base, "--tag", upgraded, "--provider-changes", "upgrade", **unreleased
        )
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        assert f"apache-airflow-providers-celery: base 3.25.0 -> 3.26.0+{local_version()} (upgrade)" in proc.stdout
        image = versions(engine, upgraded)
        assert {name: image[name] for name in wanted} == wanted
        # Dependencies resolved against the base's installed set: nothing it had changed version.
        assert {n: v for n, v in base.items() if n not in wanted and image.get(n) != v} == {}
        assert run(engine, upgraded, "python", "-m", "pip", "check").returncode == 0
    finally:
        engine.run("rmi", "--force", upgraded, check=False)


def doc_extend_example() -> str:
    text = (REPO / "docs" / "image.md").read_text()
    block = re.search(r"<!-- extend-example:.*?-->\n```dockerfile\n(.*?)```", text, re.DOTALL)
    assert block, "docs/image.md lost its extend-example block"
    return block.group(1)


@default_line_only
def test_extending_the_image_as_documented_keeps_the_patches(engine, patched, tmp_path):
    wanted = patched_versions()
    context = tmp_path / "extend"
    context.mkdir()
    # pip in these builds needs the host's CA bundle (a TLS-inspecting proxy here), as an image layer
    # under the documented Dockerfile, which stays as written but for its FROM.
    prefix = ""
    bundle = pip_ca_bundle()
    if bundle:
        (context / "pip-ca.crt").write_bytes(bundle.read_bytes())
        prefix = f"FROM {patched}\nUSER 0\nCOPY pip-ca.crt /etc/pip-ca.crt\nENV PIP_CERT=/etc/pip-ca.crt\nUSER 50000\n"
        build(engine, prefix, f"{patched}-with-ca", context)
    example = doc_extend_example()
    assert example.startswith("FROM airflow-patchset:")
    dockerfile = re.sub(r"^FROM \S+", f"FROM {patched}-with-ca" if bundle else f"FROM {patched}", example)
    extended = f"localhost/airflow-patchset-test:extended-{uuid.uuid4().hex[:6]}"
    lost = f"{extended}-lost"
    try:
        proc = build(engine, dockerfile, extended, context)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        image = versions(engine, extended)
        assert {name: image[name] for name in wanted} == wanted
        assert "apache-airflow-providers-redis" in image

        # Without the constraint, pip replaces the patched provider with upstream's, silently...
        proc = build(engine, f"FROM {extended}\nRUN pip install --no-deps --force-reinstall apache-airflow-providers-celery==3.26.0\n", lost, context)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert versions(engine, lost)["apache-airflow-providers-celery"] == "3.26.0"
        # ...which airflow-patchset check reports, naming it.
        proc = run(engine, lost, "bash", "-c", "airflow-patchset check")
        assert proc.returncode == 1
        assert f"apache-airflow-providers-celery: 3.26.0 (the patch set's is 3.26.0+{local_version()})" in proc.stderr
        # With the constraint, pip refuses the same install.
        proc = build(
            engine,
            f"FROM {extended}\nRUN pip install --constraint /home/airflow/patchset-constraints.txt "
            "--no-deps --force-reinstall apache-airflow-providers-celery==3.26.0\n",
            f"{extended}-refused",
            context,
        )
        assert proc.returncode != 0, proc.stdout[-2000:]
    finally:
        engine.run("rmi", "--force", lost, extended, f"{extended}-refused", f"{patched}-with-ca", check=False)


@default_line_only
def test_the_build_context_is_docker_and_the_wheels(engine, standin, tmp_path):
    """What the builder sees of the repository root, through .dockerignore (on the stand-in's OS image)."""
    probe = f"localhost/airflow-patchset-test:context-{uuid.uuid4().hex[:6]}"
    (tmp_path / "Containerfile").write_text(f"FROM {OS_REPOSITORY}:{SUITE}\nCOPY . /ctx\n")
    try:
        engine.run("build", "--file", str(tmp_path / "Containerfile"), "--tag", probe, str(REPO), timeout=300)
        proc = engine.run("run", "--rm", probe, "find", "/ctx", "-type", "f")
        files = sorted(proc.stdout.split())
    finally:
        engine.run("rmi", "--force", probe, check=False)
    assert files, "nothing entered the context"
    outside = [f for f in files if not (f.startswith("/ctx/docker/") or (f.startswith("/ctx/dist/") and f.endswith(".whl")))]
    assert outside == []
    assert f"/ctx/{dist_dir().relative_to(REPO)}/".replace("//", "/") in "".join(files)
    assert "/ctx/docker/Dockerfile" in files
