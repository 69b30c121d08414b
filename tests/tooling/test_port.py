"""One fix, every line: ``pstool port`` carries a change made in one line's tree to the other's.

A throwaway repository with the two real release lines (their real locks, so real 3.3.2 and 3.4.0b2
pristine trees) and a one-patch series each: a module both lines carry. A one-line fix committed in
the 3.3 tree reaches the 3.4 line with one command, and one repository commit holds both lines'
patch changes; the twins check (``pstool twins``, run by ``pstool verify``) flags a fix made on one
line only, and shows it; a fix whose context differs on the other line stops with the conflict and
finishes with ``--continue`` once resolved.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = "airflow-core/src/airflow/utils/patchset_port_probe.py"
PATCH = "alpha/0001-add-a-probe-module-both-lines-carry.patch"
PROBE_TEXT = '''"""A module both lines carry."""


def answer() -> int:
    """The answer."""
    return 41
'''

pytestmark = [pytest.mark.line_independent, pytest.mark.timeout(900)]


class Lines:
    """A repository holding lines/3.3 and lines/3.4 (real locks, own series), built under build/."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for line in ("3.3", "3.4"):
            src, dest = REPO / "lines" / line, root / "lines" / line
            (dest / "patches").mkdir(parents=True)
            for name in ("upstream.lock", "constraints.txt", "line.toml"):
                shutil.copy(src / name, dest / name)
            (dest / "patches" / "series").write_text("")
        (root / ".gitignore").write_text("/build/\n")
        self.git("init", "-q", cwd=root)
        self.git("add", "-A", cwd=root)
        self.git("commit", "-qm", "two lines", cwd=root)

    def env(self, line: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHSET_")}
        env.update(
            PYTHONPATH=str(REPO / "dev"),
            PATCHSET_LINE=line,
            PATCHSET_LINES=str(self.root / "lines"),
            PATCHSET_BUILD=str(self.root / "build"),
            PATCHSET_CACHE=str(REPO / ".cache" / "upstream"),
        )
        return env

    def pstool(self, *args: str, line: str = "3.3", check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "pstool", *args], env=self.env(line), capture_output=True, text=True, cwd=self.root
        )
        if check and proc.returncode:
            raise AssertionError(f"pstool {' '.join(args)} ({line}) failed:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def tree(self, line: str) -> Path:
        return self.root / "build" / line / "tree"

    def git(self, *args: str, cwd: Path) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
            cwd=cwd, check=True, capture_output=True, text=True,
        ).stdout

    def edit(self, line: str, old: str, new: str, message: str) -> None:
        path = self.tree(line) / PROBE
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new, 1))
        self.git("commit", "-qam", message, cwd=self.tree(line))

    def patch_text(self, line: str) -> str:
        return (self.root / "lines" / line / "patches" / PATCH).read_text()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both lines carry the probe module as patch alpha/0001, recorded as together."""
    lines = Lines(tmp_path_factory.mktemp("port") / "repo")
    for line in ("3.3", "3.4"):
        lines.pstool("checkout", line=line)
        tree = lines.tree(line)
        (tree / PROBE).write_text(PROBE_TEXT)
        lines.git("add", PROBE, cwd=tree)
        lines.git(
            "commit", "-qm",
            "Add a probe module both lines carry\n\nWhy.\n\nFeature: alpha\nUpstream-Status: Pending (test)\nDepends: none\n",
            cwd=tree,
        )
        lines.pstool("export", line=line)
    lines.pstool("twins", "--accept", PATCH)
    lines.git("add", "-A", cwd=lines.root)
    lines.git("commit", "-qm", "alpha on both lines", cwd=lines.root)
    return lines.root


@pytest.fixture
def two_lines(template: Path, tmp_path: Path) -> Lines:
    """A copy of the template repository and its two trees, for one test to change."""
    subprocess.run(["cp", "-a", str(template), str(tmp_path / "repo")], check=True)
    lines = Lines.__new__(Lines)
    lines.root = tmp_path / "repo"
    return lines


def test_a_one_line_fix_reaches_both_lines_with_one_command_and_one_commit(two_lines: Lines) -> None:
    two_lines.edit("3.3", "return 41", "return 42", "fixup! Add a probe module both lines carry")
    proc = two_lines.pstool("port", "--from", "3.3", "--commit", "HEAD")
    assert "3.4: rewrote 1 file(s)" in proc.stdout, proc.stdout
    for line in ("3.3", "3.4"):
        assert "+    return 42\n" in two_lines.patch_text(line)
        assert "return 41" not in two_lines.patch_text(line)
        # The fix is squashed into the patch's commit on both trees: one commit after the base.
        log = two_lines.git("log", "--format=%s", "refs/patches/upstream-base..HEAD", cwd=two_lines.tree(line))
        assert log.splitlines() == ["Add a probe module both lines carry"]
        assert "return 42" in (two_lines.tree(line) / PROBE).read_text()
    # One repository commit holds both lines' patch changes and the twins record.
    two_lines.git("add", "-A", cwd=two_lines.root)
    two_lines.git("commit", "-qm", "Fix the probe on both lines", cwd=two_lines.root)
    changed = two_lines.git("show", "--name-only", "--format=", "HEAD", cwd=two_lines.root).split()
    assert sorted(changed) == sorted([f"lines/3.3/patches/{PATCH}", f"lines/3.4/patches/{PATCH}", "lines/twins.toml"])
    assert two_lines.pstool("twins").returncode == 0
    assert two_lines.pstool("export", "--check", line="3.4").returncode == 0


def test_the_check_flags_a_fix_made_on_one_line_only(two_lines: Lines) -> None:
    two_lines.edit("3.3", "return 41", "return 43", "fixup! Add a probe module both lines carry")
    tree = two_lines.tree("3.3")
    subprocess.run(
        ["git", "rebase", "-q", "-i", "--autosquash", "refs/patches/upstream-base"],
        cwd=tree, check=True, env={**os.environ, "GIT_SEQUENCE_EDITOR": "true", "GIT_EDITOR": "true"},
    )
    two_lines.pstool("export", line="3.3")
    proc = two_lines.pstool("twins", check=False)
    assert proc.returncode == 1
    assert f"{PATCH} changed on 3.3 only since the last port (3.4 did not)" in proc.stderr
    assert "-+    return 41" in proc.stderr and "++    return 43" in proc.stderr  # what changed, shown
    # Accepting it on purpose, with the reason, is recorded and shown from then on.
    two_lines.pstool("twins", "--accept", PATCH, "--reason", "3.3 answers 43")
    proc = two_lines.pstool("twins")
    assert "differ on purpose: 3.3 answers 43" in proc.stdout


def test_a_fix_that_conflicts_on_the_other_line_stops_there_and_continues(two_lines: Lines) -> None:
    # The 3.4 twin changed the same line on purpose, earlier.
    two_lines.edit("3.4", '    """The answer."""', '    """The answer, on 3.4."""', "fixup! Add a probe module both lines carry")
    tree34 = two_lines.tree("3.4")
    subprocess.run(
        ["git", "rebase", "-q", "-i", "--autosquash", "refs/patches/upstream-base"],
        cwd=tree34, check=True, env={**os.environ, "GIT_SEQUENCE_EDITOR": "true", "GIT_EDITOR": "true"},
    )
    two_lines.pstool("export", line="3.4")
    two_lines.pstool("twins", "--accept", PATCH, "--reason", "3.4 says so")
    before = {line: two_lines.patch_text(line) for line in ("3.3", "3.4")}

    two_lines.edit("3.3", '    """The answer."""', '    """The answer to everything."""', "fixup! Add a probe module both lines carry")
    proc = two_lines.pstool("port", "--from", "3.3", "--commit", "HEAD", check=False)
    assert proc.returncode == 1
    assert "stopped on a conflict" in proc.stderr and PROBE in proc.stderr
    assert two_lines.git("diff", "--name-only", "--diff-filter=U", cwd=tree34).split() == [PROBE]
    # Nothing is exported while the port is stopped.
    assert {line: two_lines.patch_text(line) for line in ("3.3", "3.4")} == before

    (tree34 / PROBE).write_text(PROBE_TEXT.replace('"""The answer."""', '"""The answer to everything, on 3.4."""'))
    two_lines.git("add", PROBE, cwd=tree34)
    proc = two_lines.pstool("port", "--continue")
    assert "The answer to everything, on 3.4." in two_lines.patch_text("3.4")
    assert "The answer to everything." in two_lines.patch_text("3.3")
    assert two_lines.pstool("twins").returncode == 0


def test_a_port_refuses_while_another_fixup_waits_in_the_source_tree(two_lines: Lines) -> None:
    """Two pending fixups: porting one would squash and export both on the source line, one elsewhere."""
    two_lines.edit("3.3", "return 41", "return 42", "fixup! Add a probe module both lines carry")
    two_lines.edit("3.3", '    """The answer."""', '    """The answer, fixed."""', "fixup! Add a probe module both lines carry")
    before = {line: two_lines.patch_text(line) for line in ("3.3", "3.4")}
    heads = {line: two_lines.git("rev-parse", "HEAD", cwd=two_lines.tree(line)) for line in ("3.3", "3.4")}

    for rev in ("HEAD", "HEAD~1"):
        proc = two_lines.pstool("port", "--from", "3.3", "--commit", rev, check=False)
        assert proc.returncode == 1
        assert "other fixup commits not squashed yet" in proc.stderr, proc.stderr
        assert "Port one at a time" in proc.stderr

    # Nothing moved: no tree, no exported patch, no saved port state.
    assert {line: two_lines.patch_text(line) for line in ("3.3", "3.4")} == before
    assert {line: two_lines.git("rev-parse", "HEAD", cwd=two_lines.tree(line)) for line in ("3.3", "3.4")} == heads
    assert not (two_lines.root / "build" / "port-state.json").exists()

    # One at a time, as the message says, both reach the other line.
    tree = two_lines.tree("3.3")
    two_lines.git("branch", "keep", "HEAD", cwd=tree)
    two_lines.git("reset", "-q", "--hard", "HEAD~1", cwd=tree)
    two_lines.pstool("port", "--from", "3.3", "--commit", "HEAD")
    two_lines.git("cherry-pick", "keep", cwd=tree)
    two_lines.pstool("port", "--from", "3.3", "--commit", "HEAD")
    for line in ("3.3", "3.4"):
        assert "+    return 42\n" in two_lines.patch_text(line)
        assert '"""The answer, fixed."""' in two_lines.patch_text(line)
    assert two_lines.pstool("twins").returncode == 0
