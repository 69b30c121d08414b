"""``pstool verify``'s UI lint (upstream's ``ts-compile-lint-ui`` hook on the files the series changes)
fails on a type error and on a formatting error in a changed file.

That it passes on the series as it is, is verify's own step ("UI lint (eslint, prettier, tsc) passed on
the N UI files the series changes"), which ``make test`` runs on each line before these tests; a test
repeating it on the same files took 2 minutes of CI.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "dev"))
sys.path.insert(0, str(ROOT / "tests"))

import lines  # noqa: E402
from pstool import PatchsetError, ui  # noqa: E402

BADGE = "airflow-core/src/airflow/ui/src/components/FailureCauseBadge.tsx"
pytestmark = [pytest.mark.line_independent, pytest.mark.timeout(600)]


def _git(tree: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=tree, check=True, capture_output=True)


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clone of the line's tree (the series applied), with a machine cache (lint stamps) of its own."""
    tree = tmp_path / "tree"
    subprocess.run(["git", "clone", "-q", str(lines.TREE), str(tree)], check=True)
    _git(tree, "fetch", "-q", "origin", "refs/patches/upstream-base:refs/patches/upstream-base")
    # The lint stamps go to a machine cache of the test's own; the pnpm store (a download cache, not a
    # stamp) stays the machine's, so the lint installs from it instead of downloading the UI's packages.
    monkeypatch.setenv("PATCHSET_PNPM_STORE", str(ui.pnpm_store()))
    monkeypatch.setenv("PATCHSET_MACHINE_CACHE", str(tmp_path / "machine"))
    return tree


def _commit(tree: Path, transform, message: str) -> None:
    path = tree / BADGE
    path.write_text(transform(path.read_text()))
    _git(tree, "commit", "-qam", message)


def test_a_type_error_in_a_changed_file_fails(scratch: Path) -> None:
    assert "src/components/FailureCauseBadge.tsx" in ui.changed_ui_files(scratch)
    _commit(scratch, lambda t: t + "\nexport const wrong: number = \"not a number\";\n", "A type error")
    with pytest.raises(PatchsetError, match=r"tsc \(changed files\)"):
        ui.lint(scratch)
    assert not (scratch.parent / "machine" / "checks").exists(), "a failed lint left a stamp"


def test_a_formatting_error_in_a_changed_file_fails(scratch: Path) -> None:
    _commit(scratch, lambda t: t + "\nexport const spaced   =    1 ;\n", "Badly formatted")
    with pytest.raises(PatchsetError, match=r"prettier --check"):
        ui.lint(scratch)
