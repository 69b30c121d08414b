"""Tests of the patch-set tooling against the real pinned upstream wheels and real git."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.line_independent  # pstool itself, on the default line's pristine base (conftest.Pstool.line)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

from pstool import PatchsetError  # noqa: E402
from pstool.layout import CORE, SDK, tree_to_wheels, wheel_to_tree  # noqa: E402
from pstool.lock import fetch, load_lock  # noqa: E402
from pstool.paths import LOCK_FILE  # noqa: E402


def test_hash_mismatch_is_rejected_naming_the_file(tmp_path: Path) -> None:
    # The session's line, text and pins alike: its files are in the cache already (no download).
    lock_text = LOCK_FILE.read_text()
    pinned = load_lock(LOCK_FILE).wheel("apache-airflow-task-sdk")
    bad = tmp_path / "upstream.lock"
    bad.write_text(lock_text.replace(pinned.sha256, "0" * 64))
    with pytest.raises(PatchsetError) as err:
        fetch(load_lock(bad), quiet=True)
    assert pinned.file in str(err.value)
    assert "hash mismatch" in str(err.value)


def test_shared_library_maps_to_one_tree_path_and_back_to_both_wheels() -> None:
    member = "airflow/_shared/state/__init__.py"
    sdk_member = "airflow/sdk/_shared/state/__init__.py"
    tree_path = "shared/state/src/airflow_shared/state/__init__.py"
    assert wheel_to_tree(CORE, member) == tree_path
    assert wheel_to_tree(SDK, sdk_member) == tree_path
    assert tree_to_wheels(tree_path, [CORE, SDK]) == [(CORE, member), (SDK, sdk_member)]
    assert wheel_to_tree(CORE, "airflow/_shared/__init__.py") == "airflow-core/src/airflow/_shared/__init__.py"
    assert tree_to_wheels("providers/cncf/kubernetes/src/airflow/providers/cncf/kubernetes/x.py",
                          [CORE, "apache-airflow-providers-cncf-kubernetes"]) == [
        ("apache-airflow-providers-cncf-kubernetes", "airflow/providers/cncf/kubernetes/x.py")
    ]
    assert tree_to_wheels("airflow-core/newsfragments/1.feature.rst", [CORE]) == []


def test_checkout_lays_out_shared_libraries_once_with_upstream_symlinks(pstool: Any) -> None:
    pstool.run("checkout")
    shared = pstool.tree / "shared/state/src/airflow_shared/state/__init__.py"
    assert shared.is_file()
    link = pstool.tree / "airflow-core/src/airflow/_shared/state"
    assert link.is_symlink() and (link / "__init__.py").read_bytes() == shared.read_bytes()
    sdk_link = pstool.tree / "task-sdk/src/airflow/sdk/_shared/state"
    assert sdk_link.is_symlink() and (sdk_link / "__init__.py").read_bytes() == shared.read_bytes()
    assert not (pstool.tree / "airflow-core/src/airflow/sdk").exists()


def test_export_is_byte_stable_and_round_trips(seeded: Any) -> None:
    first = {p: p.read_bytes() for p in sorted(seeded.patches.rglob("*")) if p.is_file()}
    assert (seeded.patches / "series").read_text().count(".patch") == 2
    assert seeded.run("export", "--check").returncode == 0
    # Materialize again from patches/ and export: not a byte may change.
    seeded.run("checkout")
    assert seeded.run("export", "--check").returncode == 0
    seeded.run("export")
    second = {p: p.read_bytes() for p in sorted(seeded.patches.rglob("*")) if p.is_file()}
    assert first == second
    text = next(iter(v for k, v in first.items() if k.name.endswith(".patch"))).decode()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "Patch-Filename" not in text and "index 0000000000000000000000000000000000000000.." not in text


def test_export_check_fails_when_a_byte_would_change(seeded: Any) -> None:
    patch = sorted(seeded.patches.rglob("*.patch"))[0]
    patch.write_bytes(patch.read_bytes().replace(b"Why it matters.", b"Why it matters!"))
    proc = seeded.run("export", "--check", check=False)
    assert proc.returncode == 1
    assert patch.relative_to(seeded.patches).as_posix() in proc.stderr


def test_patch_needing_an_offset_is_rejected(seeded: Any) -> None:
    # Re-create the alpha patch against a file with one extra line on top: it now applies to
    # pristine upstream only at an offset, which strict apply must refuse.
    scratch = seeded.root / "scratch"
    subprocess.run(["git", "clone", "-q", str(seeded.tree), str(scratch)], check=True)
    seeded.git("checkout", "-q", "refs/tags/upstream/3.3.2", cwd=scratch)
    path = scratch / "airflow-core/src/airflow/utils/state.py"
    path.write_text("# one extra line\n" + path.read_text())
    seeded.git("commit", "-qam", "shift", cwd=scratch)
    path.write_text(path.read_text().replace('    SCHEDULED = "scheduled"\n', '    SCHEDULED = "scheduled"\n    # alpha was here\n', 1))
    seeded.git("commit", "-qam", "Shifted\n\nFeature: alpha\nUpstream-Status: Pending\nDepends: none", cwd=scratch)
    shifted = seeded.git("format-patch", "--stdout", "-1", "HEAD", cwd=scratch)
    alpha = next(seeded.patches.glob("alpha/*.patch"))
    alpha.write_text(shifted)
    proc = seeded.run("checkout", check=False)
    assert proc.returncode == 1
    assert "offset" in proc.stderr and alpha.name in proc.stderr
    assert seeded.run("verify", "--no-generated", check=False).returncode == 1


def test_patch_with_changed_context_is_rejected_not_fuzzed(seeded: Any) -> None:
    alpha = next(seeded.patches.glob("alpha/*.patch"))
    lines = alpha.read_text().split("\n")
    hunk = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    context = next(i for i in range(hunk + 1, len(lines)) if lines[i].startswith(" ") and lines[i].strip())
    lines[context] = lines[context] + "  # changed upstream"
    alpha.write_text("\n".join(lines))
    proc = seeded.run("checkout", check=False)
    assert proc.returncode == 1 and "does not apply" in proc.stderr


def test_verify_checks_series_and_feature_independence(seeded: Any) -> None:
    out = seeded.run("verify", "--no-generated").stdout
    assert "alpha: applies alone with no dependencies" in out
    assert "beta: applies alone with alpha" in out
    (seeded.patches / "alpha" / "stray.patch").write_text("x\n")
    proc = seeded.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1 and "not named in the series" in proc.stderr


def test_verify_requires_trailers_and_declared_dependencies(seeded: Any) -> None:
    beta = next(seeded.patches.glob("beta/*.patch"))
    beta.write_text(beta.read_text().replace("Depends: alpha\n", "Depends: none\n"))
    # beta alone still applies (it touches another file): independence holds, so only trailers matter.
    assert seeded.run("verify", "--no-generated").returncode == 0
    beta.write_text(beta.read_text().replace("Upstream-Status: Pending (test)\n", ""))
    proc = seeded.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1 and "Upstream-Status" in proc.stderr


def test_build_is_reproducible_versioned_and_carries_a_manifest(seeded: Any) -> None:
    seeded.run("checkout")
    first = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in map(Path, seeded.run("build").stdout.split())}
    second = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in map(Path, seeded.run("build").stdout.split())}
    assert first == second
    # alpha touches core; beta touches a shared library, which ships in core AND task-sdk.
    label = seeded.label()  # the lock's, e.g. ps.2: a release changes no test
    assert sorted(first) == [f"apache_airflow_core-3.3.2+{label}-py3-none-any.whl", f"apache_airflow_task_sdk-1.3.2+{label}-py3-none-any.whl"]
    core = zipfile.ZipFile(seeded.dist / f"apache_airflow_core-3.3.2+{label}-py3-none-any.whl")
    sdk = zipfile.ZipFile(seeded.dist / f"apache_airflow_task_sdk-1.3.2+{label}-py3-none-any.whl")
    assert b"BETA_MARKER" in core.read("airflow/_shared/state/__init__.py")
    assert core.read("airflow/_shared/state/__init__.py") == sdk.read("airflow/sdk/_shared/state/__init__.py")
    assert f"Version: 3.3.2+{label}".encode() in core.read(f"apache_airflow_core-3.3.2+{label}.dist-info/METADATA")
    manifest = core.read(f"apache_airflow_core-3.3.2+{label}.dist-info/patchset.json").decode()
    assert '"feature": "alpha"' in manifest and '"feature": "beta"' in manifest
    record = core.read(f"apache_airflow_core-3.3.2+{label}.dist-info/RECORD").decode()
    assert "airflow/_shared/state/__init__.py,sha256=" in record


def test_export_upstream_applies_with_git_am_at_the_base(seeded: Any) -> None:
    out_dir = Path(seeded.run("export-upstream", "beta").stdout.strip())
    files = sorted(out_dir.glob("*.patch"))
    cover = files[0].read_text()
    assert "base-commit: " + seeded.lock().commit in cover and "alpha" in cover
    series = files[1:]
    assert len(series) == 2  # alpha (dependency) then beta
    for f in series:
        text = f.read_text()
        assert "Feature:" not in text and "Depends:" not in text and "Patch-Filename" not in text
    fresh = seeded.root / "fresh"
    subprocess.run(["git", "clone", "-q", str(seeded.tree), str(fresh)], check=True)
    seeded.git("checkout", "-q", "refs/tags/upstream/3.3.2", cwd=fresh)
    seeded.git("am", *map(str, series), cwd=fresh)
    assert "BETA_MARKER" in (fresh / "shared/state/src/airflow_shared/state/__init__.py").read_text()


def _synthetic_release(pstool: Any, dest: Path, edits: dict[str, callable]) -> None:
    """Write a fake apache-airflow-core 3.3.99 wheel: the one ``pstool`` (its line, 3.3) pins, with some files edited."""
    dest.mkdir()
    pinned = pstool.lock()
    src = REPO / ".cache" / "upstream" / pinned.wheel(CORE).file
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest / "apache_airflow_core-3.3.99-py3-none-any.whl", "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename in edits:
                data = edits[info.filename](data.decode()).encode()
            zout.writestr(info, data)
    sdk = pinned.wheel(SDK).file
    (dest / sdk).write_bytes((REPO / ".cache" / "upstream" / sdk).read_bytes())


def test_drift_classifies_each_patch_on_a_synthetic_newer_release(pstool: Any) -> None:
    pstool.run("checkout")
    base_lines = (pstool.tree / "airflow-core/src/airflow/utils/state.py").read_text()
    assert 'SUCCESS = "success"' in base_lines
    f = "airflow-core/src/airflow/utils/"
    pstool.commit(f + "state.py", lambda t: t + "\n# upstreamed line\n", "Already upstream change", "drift")
    pstool.commit(f + "file.py", lambda t: t + "\n# clean change\n", "Clean change", "drift")
    pstool.commit(f + "helpers.py", lambda t: t.replace("import ", "import  ", 1), "Offset change", "drift")
    pstool.commit(f + "dates.py", lambda t: t.replace("from __future__ import annotations\n", "from __future__ import annotations  # ours\n", 1), "Conflicting change", "drift")
    pstool.run("export")
    newer = pstool.root / "newer"
    _synthetic_release(
        pstool,
        newer,
        {
            "airflow/utils/state.py": lambda t: t + "\n# upstreamed line\n",
            "airflow/utils/helpers.py": lambda t: "# a new first line\n# and another\n" + t,
            "airflow/utils/dates.py": lambda t: t.replace("from __future__ import annotations\n", "from __future__ import annotations  # theirs\n", 1),
        },
    )
    proc = pstool.run("drift", "3.3.99", "--from-dir", str(newer), check=False)
    report = {line.split()[0]: " ".join(line.split()[1:]) for line in proc.stdout.splitlines() if line.startswith("  ")}
    by_subject = {name.split("-", 1)[1]: status for name, status in report.items()}
    assert by_subject["already-upstream-change.patch"] == "already upstream"
    assert by_subject["clean-change.patch"] == "clean"
    assert by_subject["offset-change.patch"] == "clean (offset)"
    assert by_subject["conflicting-change.patch"] == "conflicts"
    assert proc.returncode == 1


def test_export_upstream_lists_the_edits_the_release_cannot_carry(pstool: Any, tmp_path: Path) -> None:
    """A new docs page needs its toctree entry, a new test module may belong in upstream's: the cover says so."""
    import os

    pstool.run("checkout")
    page = "airflow-core/docs/core-concepts/widgets.rst"
    module = "airflow-core/tests/unit/models/test_widgets.py"
    for path, text in ((page, "Widgets\n=======\n"), (module, "def test_widget():\n    pass\n")):
        (pstool.tree / path).parent.mkdir(parents=True, exist_ok=True)
        (pstool.tree / path).write_text(text)
    pstool.git("add", page, module)
    pstool.git("commit", "-q", "-m", "Document widgets\n\nWhy.\n\nFeature: gamma\nUpstream-Status: Pending (test)\nDepends: none\n")
    pstool.run("export")
    edits = tmp_path / "upstream-edits.toml"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**pstool.env, "PATCHSET_UPSTREAM_EDITS": str(edits)}
        return subprocess.run([sys.executable, "-m", "pstool", *args], env=env, capture_output=True, text=True, cwd=pstool.root)

    # A docs page nobody placed in a toctree: export-upstream refuses, naming the page and the file to fill.
    edits.write_text("")
    proc = run("export-upstream", "gamma")
    assert proc.returncode != 0
    assert f"{page} is a new docs page with no toctree entry in upstream-edits.toml" in proc.stderr

    edits.write_text(
        f'[toctree."{page}"]\nindex = "airflow-core/docs/core-concepts/index.rst"\ntoctree = "**Workloads**"\n'
        'after = "tasks"\n\n'
        f'[tests."{module}"]\nmodule = "airflow-core/tests/unit/models/test_taskinstance.py"\n'
    )
    proc = run("export-upstream", "gamma")
    assert proc.returncode == 0, proc.stderr
    cover = (Path(proc.stdout.strip()) / "0000-cover-letter.patch").read_text()
    assert "Edits to make when opening the pull request" in cover
    assert "  Patch 1/1 (Document widgets):" in cover
    assert (
        '    - airflow-core/docs/core-concepts/index.rst: in the toctree under "**Workloads**", after the line '
        '"tasks", add the line\n            widgets\n' in cover
    )
    assert f"    - {module}: upstream keeps these tests in airflow-core/tests/unit/models/test_taskinstance.py" in cover
    assert os.path.exists(Path(proc.stdout.strip()) / "0001-document-widgets.patch")


def _existing_tests_edits(root: Path, entries: list[tuple[str, str, list[str], str]]) -> None:
    """Write the series' upstream-edits.toml: one [[existing_tests."<patch>"]] per (patch, module, tests, extra)."""
    text = ""
    for key, module, tests, extra in entries:
        names = ", ".join(f'"{t}"' for t in tests)
        text += f'[[existing_tests."{key}"]]\nmodule = "{module}"\ntests = [{names}]\n'
        text += f'edit = "add `marker: None` to each expected body"\n{extra}\n'
    (root / "upstream-edits.toml").write_text(text)


def test_export_upstream_lists_the_existing_tests_each_patch_must_edit(seeded: Any) -> None:
    """Upstream's own tests that a patch's change breaks are listed in the cover, under that patch only."""
    alpha = next(seeded.patches.glob("alpha/*.patch")).relative_to(seeded.patches).with_suffix("").as_posix()
    beta = next(seeded.patches.glob("beta/*.patch")).relative_to(seeded.patches).with_suffix("").as_posix()
    module = "airflow-core/tests/unit/utils/test_state.py"
    _existing_tests_edits(
        seeded.root,
        [
            (alpha, module, ["TestState::test_callback_states"], 'read = "apache/airflow main, 2026-12-05"'),
            (beta, "shared/state/tests/state/test_marker.py", ["test_marker", "test_marker_again"], ""),
            (beta, "airflow-core/tests/unit/other.py", ["test_only_on_another_line"], 'lines = ["3.4"]'),
        ],
    )
    out_dir = Path(seeded.run("export-upstream", "beta").stdout.strip())
    cover = (out_dir / "0000-cover-letter.patch").read_text()
    first = cover.index("  Patch 1/2 (Mark the callback states):")
    second = cover.index("  Patch 2/2 (Add a marker to the shared state library):")
    assert first < second
    assert (
        f"    - {module}: add `marker: None` to each expected body\n        In:\n"
        "            TestState::test_callback_states\n        (apache/airflow main, 2026-12-05)\n"
    ) in cover[first:second]
    assert (
        "    - shared/state/tests/state/test_marker.py: add `marker: None` to each expected body\n        In:\n"
        "            test_marker\n            test_marker_again\n"
    ) in cover[second:]
    # An edit that only another line's version of the patch needs is not this line's to list.
    assert "test_only_on_another_line" not in cover


def test_verify_fails_on_an_existing_tests_edit_keyed_by_no_patch(seeded: Any) -> None:
    """A renamed or dropped patch must not lose its recorded test edits from the cover letters silently."""
    module = "airflow-core/tests/unit/utils/test_state.py"
    _existing_tests_edits(seeded.root, [("alpha/0009-no-such-patch", module, ["test_x"], "")])
    proc = seeded.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1
    assert '[[existing_tests."alpha/0009-no-such-patch"]] names no patch of the 3.3 line\'s series' in proc.stderr
    # Keyed like a file, not like a patch of the series: refused too.
    _existing_tests_edits(seeded.root, [("alpha/0009-no-such-patch.patch", module, ["test_x"], "")])
    proc = seeded.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1
    assert "without .patch" in proc.stderr
    # The same key for another line's series only is that line's verify to check.
    _existing_tests_edits(seeded.root, [("alpha/0009-no-such-patch", module, ["test_x"], 'lines = ["3.4"]')])
    assert seeded.run("verify", "--no-generated").returncode == 0


def test_the_pstool_subprocess_finds_ruff_in_a_clone_without_the_default_lines_venv(tmp_path: Path) -> None:
    """CI runs these tests in the 3.4 line's clone, which has no ``.venv`` (the default line's): the
    review checks' ruff then came from nowhere ("ruff not found") and every verify here failed. The
    subprocess now gets this session's ruff, the same pinned version on both lines."""
    from conftest import SYSTEM_PYTHON, Pstool

    pstool = Pstool(tmp_path)
    env = {**pstool.env, "PATCHSET_VENV": str(tmp_path / "no-such-venv")}  # as in that clone
    proc = subprocess.run(
        [SYSTEM_PYTHON, "-c", "from pstool.checks import _ruff; print(_ruff())"],
        env=env, capture_output=True, text=True, check=True, cwd=tmp_path,
    )
    found = proc.stdout.strip()
    assert found != "None", "the pstool subprocess has no ruff"
    assert Path(found).is_file()
    version = subprocess.run([found, "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    pins = {line: (REPO / "lines" / line / "constraints.txt").read_text() for line in ("3.3", "3.4")}
    assert all(f"ruff=={version}" in text for text in pins.values()), "ruff is not the version both lines pin"
