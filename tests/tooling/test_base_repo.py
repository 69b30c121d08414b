"""pstool.tree.base_repo: the pristine base is made once per pins and every tree is a clone of it.

Laying out the pinned sdists and wheels and committing them took about 3 s per tree, and pstool's
own tests make some forty trees. These tests run the real clone and rename code in a download cache
of their own; the base's content stands in (a one-file commit carrying the line's base tag), since
what goes into it is ``populate_pristine``'s, tested with every real tree.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

from pstool import tree as pstool_tree  # noqa: E402
from pstool.lock import load_lock  # noqa: E402

pytestmark = pytest.mark.line_independent  # pstool's own mechanics, on the default line's pins


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The download cache is the test's; each base made is recorded (in the directory it is made in)."""
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    seen: list[Path] = []

    def make_base(repo: Path, lock) -> None:
        seen.append(repo)
        _git(repo, "init", "-q")
        (repo / "README").write_text("pristine\n")
        _git(repo, "add", "README")
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qm", "base")
        _git(repo, "tag", pstool_tree.base_tag(lock))

    monkeypatch.setattr(pstool_tree, "_make_base", make_base)
    return seen


def test_trees_are_clones_of_one_base_made_once(made: list[Path], tmp_path: Path) -> None:
    lock = load_lock()
    first = pstool_tree.init_base(tmp_path / "a" / "tree")
    second = pstool_tree.init_base(tmp_path / "b" / "tree")
    assert len(made) == 1, "the base was made again for the second tree"
    repo = pstool_tree.base_repo()
    assert first == second == _git(repo, "rev-parse", pstool_tree.base_tag(lock))
    for tree in (tmp_path / "a" / "tree", tmp_path / "b" / "tree"):
        assert _git(tree, "rev-parse", pstool_tree.BASE_REF) == first
        assert _git(tree, "branch", "--show-current") == "main"
        assert _git(tree, "remote") == "", "the tree still names the cache as its origin"
        assert "__pycache__/" in (tree / ".git" / "info" / "exclude").read_text()
        assert (tree / "README").read_text() == "pristine\n"
    # A scratch tree is one more clone of the same base.
    scratch = pstool_tree.scratch_tree(tmp_path)
    assert _git(scratch, "rev-parse", "HEAD") == first and len(made) == 1


def test_a_base_left_half_made_is_never_used(made: list[Path], tmp_path: Path) -> None:
    """A killed build leaves its temporary directory, or (from an older pstool) a directory with no repository."""
    repo = tmp_path / "cache" / f"base-{pstool_tree._base_key(load_lock())}"
    repo.mkdir(parents=True)
    (repo / "half").write_text("")
    _git(repo, "init", "-q")  # a repository, but without the base's commit and tag
    (tmp_path / "cache" / f".{repo.name}.killed").mkdir()
    assert pstool_tree.base_repo() == repo
    assert len(made) == 1 and not (repo / "half").exists()
    assert _git(repo, "tag") == pstool_tree.base_tag(load_lock())


def test_another_process_that_finishes_first_is_used(made: list[Path], tmp_path: Path, monkeypatch) -> None:
    lock = load_lock()
    repo = tmp_path / "cache" / f"base-{pstool_tree._base_key(lock)}"
    inner = pstool_tree._make_base

    def racing(building: Path, lock) -> None:
        inner(building, lock)
        # The other process renames its finished base into place while this one still builds.
        other = tmp_path / "other"
        other.mkdir()
        inner(other, lock)
        (other / "OTHER").write_text("")
        other.rename(repo)

    monkeypatch.setattr(pstool_tree, "_make_base", racing)
    assert pstool_tree.base_repo() == repo
    assert (repo / "OTHER").exists(), "the finished base of the other process was replaced"
    assert sorted(p.name for p in repo.parent.iterdir()) == [repo.name], "a temporary directory was left"


def test_the_base_commit_leaves_out_byte_code_and_generator_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the tree's exclude file keeps out of patches is kept out of the base commit too."""

    def populate(dest: Path, lock, files) -> None:
        for rel in ("airflow/x.py", "airflow/__pycache__/x.cpython-311.pyc", "pyproject.toml", "scripts/ci.sh"):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_text("")

    monkeypatch.setattr(pstool_tree, "fetch", lambda lock, quiet: {})
    monkeypatch.setattr(pstool_tree, "populate_pristine", populate)
    repo = tmp_path / "base"
    repo.mkdir()
    pstool_tree._make_base(repo, load_lock())
    assert _git(repo, "ls-files").splitlines() == ["airflow/x.py"]
