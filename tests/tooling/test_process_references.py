"""The process-references check (``pstool.hygiene``): nothing of this project's process in the product.

Each pattern refuses what it is for and lets upstream's references and ordinary prose through; a
patch's message and added lines are read, its context and removed lines (upstream's text) and its
trailers are not; a pending place is reported, a stale pending entry fails; and ``pstool verify``
refuses a patch whose commit message names an internal issue, and a document that does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.line_independent  # pstool itself, on the default line's pristine base

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

from pstool import PatchsetError
from pstool.hygiene import check_process_references, scan_patch, scan_text
from pstool.series import load_series

REFUSED = [
    ("The memory escalation a try ran with (issue 37).", "issue-number"),
    ("What Issue 36 §4 asks of the claim", "issue-number"),
    ("as issues 36/37 found", "issue-number"),
    ("fixed in issue #9", "issue-number"),
    ("Give the pod more memory (#48).", "hash-number"),
    ("see #12 for the reason", "hash-number"),
    ("[#7] the storm guard", "hash-number"),
    ("Fifth round (2026-12-02): the decision", "round"),
    ("(Round 3 refused it because ...)", "round"),
    ("in the 2nd review round", "round"),
    ("as asked by the lead", "asked-by"),
    ("At the issue's full size, 200 Dags", "the-issue"),
    ("The benchmark the issue asks for", "the-issue"),
]

ALLOWED = [
    "Pod failed because of None (apache/airflow#73164)",
    "a Celery task OOM-killed silently (#61521)",
    "upstream issue 64483 asks for a retry after an OOM",
    'a queue called "gpu pool #1"',
    "a round trip through the serializer",
    "6 rounds; in every other round A SIGKILLs itself",
    "the issue here is the lock order",
    "Feature: aip-97",
]


@pytest.mark.parametrize(("text", "pattern"), REFUSED)
def test_each_pattern_refuses_what_it_is_for(text: str, pattern: str) -> None:
    found = scan_text(text, "doc.md")
    assert [r.pattern for r in found] == [pattern], found


@pytest.mark.parametrize("text", ALLOWED)
def test_upstream_references_and_prose_pass(text: str) -> None:
    assert scan_text(text, "doc.md") == []


def _patch_file(tmp_path: Path, message: str, diff: str) -> Path:
    patches = tmp_path / "patches"
    (patches / "f").mkdir(parents=True, exist_ok=True)
    (patches / "f" / "0001-x.patch").write_text(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: t <t@localhost>\nDate: Thu, 1 Jan 2026 00:00:00 +0000\nSubject: [PATCH] Do a thing\n\n"
        f"{message}\n\nFeature: f\nUpstream-Status: Pending (issue 12 of the tracker)\nDepends: none\n---\n{diff}"
    )
    (patches / "series").write_text("f/0001-x.patch\n")
    return patches


DIFF = (
    "diff --git a/a.py b/a.py\nindex 1..2 100644\n--- a/a.py\n+++ b/a.py\n@@ -1,3 +1,3 @@\n"
    " # context from upstream: see issue 12\n-# removed upstream line, issue 13\n+# added: the escalation (issue 37)\n"
)


def test_a_patch_is_read_in_its_message_and_added_lines_only(tmp_path: Path) -> None:
    patches = _patch_file(tmp_path, "Why: the storm guard, asked by the lead.", DIFF)
    (patch,) = load_series(patches)
    found = scan_patch(patch)
    assert [(r.where.split(" (")[1], r.match) for r in found] == [("message)", "asked by"), ("+ a.py)", "issue 37")]
    # The line numbers are the patch file's.
    text = (patches / "f" / "0001-x.patch").read_text().splitlines()
    assert all(r.match in text[r.line - 1] for r in found)


def test_pending_places_are_reported_and_a_stale_entry_fails(tmp_path: Path) -> None:
    patches = _patch_file(tmp_path, "Why it matters.", DIFF)
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "guide.md").write_text("Before issue 39 the benchmark measured 44.9 s.\n")
    (root / "dev").mkdir()
    series = load_series(patches)
    with pytest.raises(PatchsetError) as err:
        check_process_references(series, root, tmp_path / "none.toml")
    assert "docs/guide.md:1: 'issue 39'" in str(err.value)
    assert "f/0001-x.patch (+ a.py):" in str(err.value) and "'issue 37'" in str(err.value)

    (root / "dev" / "verify-pending.toml").write_text(
        '[[process_reference]]\nwhere = "docs/guide.md"\ncontains = "Before issue 39"\nreason = "another rewrite"\n'
        '[[process_reference]]\nwhere = "f/0001-x.patch"\ncontains = "the escalation (issue 37)"\nreason = "another rewrite"\n'
    )
    _, waiting = check_process_references(series, root, tmp_path / "none.toml")
    assert len(waiting) == 2

    (root / "docs" / "guide.md").write_text("Before the fix the benchmark measured 44.9 s.\n")
    with pytest.raises(PatchsetError) as err:
        check_process_references(series, root, tmp_path / "none.toml")
    assert "match nothing any more" in str(err.value) and "docs/guide.md: 'Before issue 39'" in str(err.value)


def test_the_cover_letters_edits_are_read_and_comments_are_not(tmp_path: Path) -> None:
    patches = _patch_file(tmp_path, "Why it matters.", DIFF.replace("(issue 37)", "(the escalation)"))
    edits = tmp_path / "upstream-edits.toml"
    edits.write_text(
        '# the issue 36 §8 count\n[[existing_tests."f/0001-x"]]\nmodule = "m.py"\ntests = ["t"]\n'
        'edit = "Add the field (issue 36)."\n'
    )
    with pytest.raises(PatchsetError) as err:
        check_process_references(load_series(patches), tmp_path, edits)
    assert "existing_tests.f/0001-x[0].edit" in str(err.value)
    assert "§8" not in str(err.value)


def test_verify_refuses_an_internal_issue_in_a_patch_commit_message(seeded: Any) -> None:
    alpha = next(seeded.patches.glob("alpha/*.patch"))
    alpha.write_text(alpha.read_text().replace("Why it matters.", "Why it matters (issue 37 §3).", 1))
    proc = seeded.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1, proc.stdout
    assert f"{alpha.relative_to(seeded.patches)} (message)" in proc.stderr
    assert "'issue 37' (issue-number)" in proc.stderr


def test_verify_refuses_an_internal_issue_in_a_document(seeded: Any) -> None:
    assert "process references: none" in seeded.run("verify", "--no-generated").stdout
    (seeded.root / "AIP-docs").mkdir()
    (seeded.root / "README.md").write_text("The escalation, asked by a committer.\n")
    proc = seeded.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1
    assert "README.md:1: 'asked by' (asked-by)" in proc.stderr
