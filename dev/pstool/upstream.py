"""``pstool export-upstream FEATURE``: a PR-ready ``git format-patch`` series for one feature.

The feature's patches (preceded by those of the features it depends on, which must land
upstream first; never an integration patch, which exists only to combine features in this patch
set) are applied to a scratch pristine tree and formatted with a cover letter that
names the upstream base commit. Internal bookkeeping trailers are stripped, as upstream
reviewers ask. The result applies with ``git am`` to upstream at the release commit.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from pstool import PatchsetError
from pstool.git import git, out
from pstool.lock import load_lock
from pstool.paths import BUILD_DIR
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
    try:
        apply_series(tree, selected, allow_offset=True)  # re-rendered below: the output has no offset
        commits = out(tree, "rev-list", "--reverse", f"{BASE_REF}..HEAD").split()
        total = len(commits)
        for number, sha in enumerate(commits, 1):
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
        lines += [f"Upstream status: {'; '.join(sorted(status))}", "", f"base-commit: {lock.commit}", ""]
        (output / "0000-cover-letter.patch").write_text("\n".join(lines))
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    return output
