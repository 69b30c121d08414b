"""``pstool export-upstream FEATURE``: a PR-ready ``git format-patch`` series for one feature.

The feature's patches (preceded by those of the features it depends on, which must land
upstream first; never an integration patch, which exists only to combine features in this patch
set) are applied to a scratch pristine tree and formatted with a cover letter that
names the upstream base commit. Internal bookkeeping trailers are stripped, as upstream
reviewers ask. The result applies with ``git am`` to upstream at the release commit.

The pinned release's sources hold neither upstream's docs index pages nor its test modules, so a
patch can add a docs page but not its toctree entry, adds its tests as a module of their own
where upstream keeps them in an existing one, and cannot edit the tests of upstream's own modules
that its change of behaviour breaks (a new field in a response that a test compares whole).
``lines/upstream-edits.toml`` records those edits; the cover letter lists them per patch, word for
word, for whoever opens the pull request (:func:`pull_request_edits`). A docs page with no recorded
toctree entry is an error, and so is an edit of existing tests keyed by no patch of the series
(``pstool verify``, :func:`pstool.verify.check_upstream_edits`).
"""

from __future__ import annotations

import re
import shutil
import textwrap
import tomllib
from pathlib import Path
from typing import Any

from pstool import PatchsetError
from pstool.git import git, out
from pstool.lock import load_lock
from pstool.paths import BUILD_DIR, LINE, UPSTREAM_EDITS_FILE, known_lines
from pstool.series import (
    INTERNAL_TRAILERS,
    dependency_closure,
    features_in_order,
    load_series,
    select_patches,
    strip_trailers,
)
from pstool.tree import BASE_REF, apply_series, scratch_tree

FORMAT_ARGS = ("--no-signature", "--full-index", "--no-renames", "--zero-commit", "--numbered")


def is_docs_page(path: str) -> bool:
    """Whether ``path`` is a page of a distribution's Sphinx docs (not a newsfragment)."""
    return "/docs/" in f"/{path}" and path.endswith(".rst") and "/newsfragments/" not in f"/{path}"


def load_upstream_edits(path: Path = UPSTREAM_EDITS_FILE) -> dict[str, dict[str, Any]]:
    """
    ``lines/upstream-edits.toml`` as ``{"toctree": {page: entry}, "tests": {module: entry},
    "existing_tests": {patch key: [entry, ...]}}``.

    A patch key is the patch's file name in the series without ``.patch``
    (``aip-97/0007-expose-failure-cause-and-failure-reason-in-the-rest-api``); each of its entries
    names an upstream test ``module``, the ``tests`` in it to edit and the ``edit`` in words, and
    optionally the ``lines`` whose version of the patch needs it (every line when absent).
    """
    if not path.exists():
        return {"toctree": {}, "tests": {}, "existing_tests": {}}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise PatchsetError(f"{path}: {err}") from err
    for page, entry in data.get("toctree", {}).items():
        missing = [k for k in ("index", "toctree", "after") if k not in entry]
        if missing:
            raise PatchsetError(f"{path}: [toctree.\"{page}\"] lacks {', '.join(missing)}")
    for module, entry in data.get("tests", {}).items():
        if "module" not in entry:
            raise PatchsetError(f"{path}: [tests.\"{module}\"] lacks module")
    existing = data.get("existing_tests", {})
    lines = known_lines()
    for key, entries in existing.items():
        where = f'{path}: [[existing_tests."{key}"]]'
        if key.endswith(".patch") or "/" not in key:
            raise PatchsetError(f"{where}: the key is the patch's name in the series without .patch (<feature>/<file>)")
        if not isinstance(entries, list):
            raise PatchsetError(f"{where}: write each edit as an array entry, [[existing_tests.\"{key}\"]]")
        for entry in entries:
            missing = [k for k in ("module", "tests", "edit") if not entry.get(k)]
            if missing:
                raise PatchsetError(f"{where} lacks {', '.join(missing)}")
            if not isinstance(entry["tests"], list) or not all(isinstance(t, str) for t in entry["tests"]):
                raise PatchsetError(f"{where}: tests is a list of test names")
            unknown = sorted(set(entry.get("lines", [])) - set(lines)) if lines else []
            if unknown:
                raise PatchsetError(f"{where}: lines names no release line: {', '.join(unknown)}")
    return {"toctree": data.get("toctree", {}), "tests": data.get("tests", {}), "existing_tests": existing}


def existing_test_edits(
    patch: str, edits: dict[str, dict[str, Any]], line: str = LINE
) -> list[dict[str, Any]]:
    """The recorded edits of upstream's existing tests that ``patch`` (its key) needs on ``line``."""
    return [e for e in edits["existing_tests"].get(patch, []) if not e.get("lines") or line in e["lines"]]


def pull_request_edits(
    added: list[str], edits: dict[str, dict[str, Any]], patch: str | None = None, line: str = LINE
) -> list[str]:
    """
    The edits to make on an upstream checkout for one patch, as cover-letter lines.

    For the files the patch adds: a docs page needs its toctree entry (an error when none is
    recorded); a test module that upstream keeps in an existing one is moved there. For the patch
    itself (``patch``, its key): the tests of upstream's existing modules that its change of
    behaviour breaks, with the edit each needs.
    """
    lines: list[str] = []
    for path in added:
        if is_docs_page(path):
            entry = edits["toctree"].get(path)
            if entry is None:
                raise PatchsetError(
                    f"{path} is a new docs page with no toctree entry in {UPSTREAM_EDITS_FILE.name}: record "
                    "the upstream index page and toctree it belongs in ([toctree.\"<page>\"])"
                )
            index = entry["index"]
            name = Path(path).relative_to(Path(index).parent).with_suffix("").as_posix()
            if entry["toctree"] == "hidden":
                lines.append(
                    f"{index}: append a hidden toctree for the new page {path}:\n"
                    f"        .. toctree::\n            :hidden:\n\n            {name}"
                )
            else:
                where = f'after the line "{entry["after"]}"' if entry["after"] else "as its first entry"
                lines.append(
                    f'{index}: in the toctree under "{entry["toctree"]}", {where}, add the line\n'
                    f"            {name}\n"
                    f"        (the new page {path})."
                )
        elif path in edits["tests"]:
            module = edits["tests"][path]["module"]
            lines.append(
                f"{path}: upstream keeps these tests in {module}; move them there (the tests, with the\n"
                "        imports and fixtures they use) instead of adding the new module."
            )
    for entry in existing_test_edits(patch, edits, line) if patch else []:
        text = textwrap.fill(
            f"{entry['module']}: {' '.join(entry['edit'].split())}",
            width=100,
            subsequent_indent=" " * 8,
            break_long_words=False,
            break_on_hyphens=False,
        )
        text += "\n        In:"
        text += "".join(f"\n            {test}" for test in entry["tests"])
        if entry.get("read"):
            text += f"\n        ({entry['read'].strip()})"
        lines.append(text)
    return lines


def export_upstream(feature: str, output: Path | None = None) -> Path:
    patches = load_series()
    features = features_in_order(patches)
    if feature not in features:
        raise PatchsetError(f"no feature {feature!r} in the series (features: {', '.join(features)})")
    closure = dependency_closure(feature, patches)
    selected = [p for p in select_patches(patches, closure) if not p.is_integration]
    own = [p for p in selected if p.feature == feature]
    deps = [f for f in features if f in closure and f != feature]
    lock = load_lock()
    output = output or BUILD_DIR / "upstream" / feature
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    tree = scratch_tree()
    edits = load_upstream_edits()
    try:
        apply_series(tree, selected, allow_offset=True)  # re-rendered below: the output has no offset
        commits = out(tree, "rev-list", "--reverse", f"{BASE_REF}..HEAD").split()
        total = len(commits)
        if total != len(selected):
            raise PatchsetError(f"{feature}: {len(selected)} patches applied as {total} commits")
        pr_edits: list[str] = []
        for number, (sha, patch) in enumerate(zip(commits, selected, strict=True), 1):
            added = out(tree, "diff-tree", "--no-commit-id", "--no-renames", "--diff-filter=A", "--name-only", "-r", sha)
            patch_edits = pull_request_edits(added.split(), edits, patch.name.removesuffix(".patch"))
            if patch_edits:
                pr_edits.append(f"  Patch {number}/{total} ({out(tree, 'log', '-1', '--format=%s', sha)}):")
                pr_edits += [f"    - {line}" for line in patch_edits]
            data = git(tree, "format-patch", "--stdout", "-1", sha, *FORMAT_ARGS, f"--start-number={number}").stdout
            # format-patch -1 --start-number=N numbers the one patch "N/N": number it in the series.
            data = re.sub(rb"^Subject: \[PATCH(?: \d+/\d+)?\]", f"Subject: [PATCH {number}/{total}]".encode(), data, count=1, flags=re.MULTILINE)
            data = strip_trailers(data, INTERNAL_TRAILERS)
            subject = out(tree, "log", "-1", "--format=%s", sha)
            slug = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")[:52].rstrip("-")
            (output / f"{number:04d}-{slug}.patch").write_bytes(data)
        status = {p.trailers.get("Upstream-Status", "") for p in own}
        lines = [
            "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001",
            "From: airflow-patchset <patchset@localhost>",
            "Date: Thu, 1 Jan 2026 00:00:00 +0000",
            f"Subject: [PATCH 0/{total}] {feature}: {own[0].subject}",
            "",
            f"This series implements {feature} against Apache Airflow {lock.release}, at upstream commit",
            f"{lock.commit} (the one the release names in airflow/git_version).",
            "",
            "Patches:",
            *[f"  {p.subject}" for p in selected],
            "",
        ]
        if deps:
            lines += [
                f"Depends on: {', '.join(deps)}.",
                f"It includes the patches of {', '.join(deps)} first, which this feature builds on;",
                "they are sent as their own pull request(s) and must land before this one.",
                "",
            ]
        else:
            lines += ["Depends on: nothing; it applies to the release as it is.", ""]
        if pr_edits:
            lines += [
                "Edits to make when opening the pull request: the release's sources hold neither",
                "upstream's docs index pages nor its test modules, so the patches cannot carry these",
                "(nor the edits of upstream's own tests that a patch's change of behaviour requires):",
                *pr_edits,
                "",
            ]
        lines += [f"Upstream status: {'; '.join(sorted(status))}", "", f"base-commit: {lock.commit}", ""]
        (output / "0000-cover-letter.patch").write_text("\n".join(lines))
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    return output
