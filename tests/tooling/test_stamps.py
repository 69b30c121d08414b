"""pstool.stamps: verify's generator and UI lint checks pass once per content on a machine.

A passed check is stamped in the machine cache under a key over the checked tree's content and the
environment that checked it. These tests run the real key and stamp code on small git trees (the
generators themselves stand in: a run is recorded, and a failing one changes a generated file the
way a stale patch would), in a machine cache of their own.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

from pstool import PatchsetError, generated, stamps  # noqa: E402

pytestmark = pytest.mark.line_independent  # pstool's own mechanics, on the default line's pins


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=tree, check=True, capture_output=True, text=True
    ).stdout


def _tree(path: Path) -> Path:
    """A selection's stand-in: the three directories the generators read, with a generated file."""
    for rel, text in ((generated.SDK_MODELS, "API_VERSION = 1\n"), ("airflow-core/x.py", "x = 1\n"), ("shared/y.py", "y = 1\n")):
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    _git(path, "init", "-q")
    _git(path, "add", "-A")
    _git(path, "commit", "-qm", "selection")
    return path


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATCHSET_MACHINE_CACHE", str(tmp_path / "machine"))
    monkeypatch.delenv("PATCHSET_RECHECK", raising=False)
    return tmp_path / "machine"


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Each generator run's tree; a tree holding ``stale`` gets its generated file rewritten."""
    seen: list[Path] = []

    def run_generators(tree: Path, venv: Path, *, from_source: bool = False) -> None:
        assert from_source
        seen.append(tree)
        if (tree / "stale").exists():
            (tree / generated.SDK_MODELS).write_text("API_VERSION = 2\n")

    monkeypatch.setattr(generated, "run_generators", run_generators)
    return seen


def test_a_pass_is_checked_once_per_content_in_every_checkout(machine: Path, runs: list[Path], tmp_path: Path) -> None:
    first = _tree(tmp_path / "first")
    assert generated.check_generated_from_source(first, "alpha") == "alpha: generated files reproduce from its own source"
    assert runs == [first]
    [stamp] = (machine / "checks").iterdir()
    assert stamp.name == f"{generated.SELECTION_CHECK}-{generated.selection_key(first)}"
    # Another checkout of the same content (a CI clone) does not run the generators again.
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(first), str(clone))
    note = generated.check_generated_from_source(clone, "alpha")
    assert runs == [first] and "passed on this machine" in note
    # Any change to what the generators read is another key, and runs them.
    (clone / "airflow-core/x.py").write_text("x = 2\n")
    _git(clone, "commit", "-qam", "change")
    generated.check_generated_from_source(clone, "alpha")
    assert runs == [first, clone]
    assert len(list((machine / "checks").iterdir())) == 2


def test_a_failed_check_leaves_no_stamp_and_fails_again(machine: Path, runs: list[Path], tmp_path: Path) -> None:
    tree = _tree(tmp_path / "tree")
    (tree / "stale").write_text("")
    _git(tree, "add", "stale")
    _git(tree, "commit", "-qm", "stale")
    for attempt in (1, 2):
        with pytest.raises(PatchsetError, match="generated files differ"):
            generated.check_generated_from_source(tree, "alpha")
        _git(tree, "checkout", "-q", "--", ".")
        assert len(runs) == attempt
    assert not (machine / "checks").exists()


def test_recheck_runs_a_stamped_check(machine: Path, runs: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _tree(tmp_path / "tree")
    generated.check_generated_from_source(tree, "alpha")
    monkeypatch.setenv("PATCHSET_RECHECK", "1")
    assert generated.check_generated_from_source(tree, "alpha") == "alpha: generated files reproduce from its own source"
    assert runs == [tree, tree]


def test_the_environment_key_covers_the_checks_code_the_lock_and_the_generator_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _tree(tmp_path / "tree")
    key = generated.selection_key(tree)
    assert generated.selection_key(tree) == key
    copy = tmp_path / "pstool"
    shutil.copytree(stamps.PSTOOL_DIR, copy)
    monkeypatch.setattr(stamps, "PSTOOL_DIR", copy)
    assert generated.selection_key(tree) == key
    (copy / "tree.py").write_text((copy / "tree.py").read_text() + "\n# one more line\n")
    assert generated.selection_key(tree) == key, "a change to code that only makes the checked tree dropped the stamps"
    for name in stamps.CHECK_MODULES:
        (copy / name).write_text((copy / name).read_text() + "\n# one more line\n")
        assert generated.selection_key(tree) != key, f"a change to {name} kept the stamps"
        key = generated.selection_key(tree)
    monkeypatch.undo()
    key = generated.selection_key(tree)
    lock = tmp_path / "lock.toml"
    lock.write_bytes(stamps.LOCK_FILE.read_bytes() + b"\n# one more pin\n")
    monkeypatch.setattr(stamps, "LOCK_FILE", lock)
    assert generated.selection_key(tree) != key, "a change to the lock kept the stamps"
    monkeypatch.undo()
    monkeypatch.setattr(generated, "generator_options", lambda: {"supervisor_typed_json_value": "changed"})
    assert generated.selection_key(tree) != key, "a change to the generator settings kept the stamps"


def test_a_stamp_is_written_whole(machine: Path) -> None:
    stamps.record("some-check", "k" * 20, "it passed")
    assert [p.name for p in (machine / "checks").iterdir()] == [f"some-check-{'k' * 20}"]
    assert stamps.passed("some-check", "k" * 20) and not stamps.passed("some-check", "j" * 20)
