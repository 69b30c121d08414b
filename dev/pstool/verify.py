"""``pstool verify``: the series' integrity checks.

1. Hygiene: every patch named in the series exists, is named once, is a git mbox ending in a
   newline, and no patch file is left out of the series.
2. Trailers: every patch carries Feature, Upstream-Status and Depends; Depends names features
   that exist and come earlier in the series. Pull-request edits (``lines/upstream-edits.toml``):
   every docs page a patch adds has its toctree entry, and every edit of upstream's existing
   tests that applies to the line is keyed by a patch of its series (``check_upstream_edits``).
3. Strict apply: the full series (every feature and the integration patches whose conditions hold)
   applies to pristine upstream with no fuzz, offset or 3-way.
4. Independence: each feature applies on its own together with the features it depends on, and no
   other (``select_patches`` of its dependency closure: no integration patch of an absent feature).
   Context must match exactly (no fuzz, no 3-way); a hunk may sit at an offset where a feature the
   full series puts earlier added lines above it. ``export-upstream`` re-renders the patches from
   that tree, so what goes upstream applies with no offset at all.
5. Nothing already upstream: no patch reverse-applies to the pristine base.
6. Generated files: first, on the line's pristine upstream tree the generators reproduce every
   generated file byte for byte (``check_pristine``: the line's generator environment is right);
   then a patch touches ``ui/dist``, ``*-generated.yaml`` or ``_generated.py`` only if
   upstream's generator reproduces the file (see ``pstool.generated``); the UI's ``openapi-gen/``
   client must be what ``pnpm codegen`` makes of the patched REST specs.
   Each feature alone too: its selection's generated files are what the generators make of that
   selection's own source (``check_generated_from_source``).
   A pass of these is stamped on the machine by the content it checked (``pstool.stamps``).
7. UI lint: when the series touches the UI source, upstream's UI hook (``ts-compile-lint-ui``: eslint,
   prettier and tsc on the files the series changes, as upstream's prek runs it on a pull request) passes
   on the patched UI (see ``pstool.ui``; stamped on the machine per UI source, ``pstool.stamps``).
8. Upstream's review checks (``pstool.checks``): on the whole series and on each feature alone; with
   them ``operator-docs``: every option and metric the series adds is in the operator documents.
9. Twins (``pstool.twins``): every patch has its twin on every other line, or says why not; no patch
   changed on one line only since the last port, unless accepted on purpose with a reason.
10. Process references (``pstool.hygiene``): no internal issue number, review round or "asked by"
    in the patches (messages and added lines), the cover letters' edits or the repository's product
    documents.
11. Guarantees ledgers (``pstool.ledger``): every AIP doc has one, with its last hostile read's date;
    every row is whole, its id unique, and every test it names exists (in the project's suite, or in
    the tree of the full series).
12. Patch dependencies (``pstool.deps``): every patch applies, and its added imports resolve, on the
    pristine release with only what its own ``Depends:`` names; a missing one is named.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from pstool import PatchsetError
from pstool.git import git
from pstool.layout import is_generated
from pstool.paths import PATCHES_DIR
from pstool.series import (
    REQUIRED_TRAILERS,
    Patch,
    dependency_closure,
    features_in_order,
    full_selection,
    load_series,
    read_series,
    select_patches,
)
from pstool.tree import apply_series, scratch_tree


def touched_paths(patch: Patch) -> list[str]:
    paths = []
    for line in patch.body.decode("utf-8", "replace").splitlines():
        if line.startswith("diff --git a/"):
            paths.append(line.split(" b/", 1)[1])
    return paths


def check_hygiene(patches_dir: Path = PATCHES_DIR) -> list[Patch]:
    names = read_series(patches_dir / "series")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PatchsetError(f"series names these patches more than once: {', '.join(dupes)}")
    on_disk = {p.relative_to(patches_dir).as_posix() for p in patches_dir.rglob("*.patch")}
    unlisted = sorted(on_disk - set(names))
    if unlisted:
        raise PatchsetError(f"patch files not named in the series: {', '.join(unlisted)}")
    patches = load_series(patches_dir)
    for patch in patches:
        if not patch.body.endswith(b"\n"):
            raise PatchsetError(f"{patch.name} does not end with a newline")
        paths = touched_paths(patch)
        if not paths:
            raise PatchsetError(f"{patch.name} changes no file")
        junk = [p for p in paths if "__pycache__/" in p or p.endswith((".pyc", ".pyo"))]
        if junk:
            raise PatchsetError(f"{patch.name} carries byte-code files: {', '.join(junk)}")
    return patches


def added_paths(patch: Patch) -> list[str]:
    """The files ``patch`` creates."""
    added, current = [], None
    for line in patch.body.decode("utf-8", "replace").splitlines():
        if line.startswith("diff --git a/"):
            current = line.split(" b/", 1)[1]
        elif line.startswith("new file mode") and current:
            added.append(current)
    return added


def check_upstream_edits(patches: list[Patch]) -> int:
    """
    The edits a pull request needs that the patches cannot carry are recorded (pstool.upstream).

    Every docs page a patch adds has its toctree entry; every recorded edit of upstream's existing
    tests that applies to this line is keyed by a patch of this line's series (a renamed or dropped
    patch would otherwise lose its edits from the cover letters without a word).
    """
    from pstool.paths import LINE, UPSTREAM_EDITS_FILE
    from pstool.upstream import existing_test_edits, load_upstream_edits, pull_request_edits

    edits = load_upstream_edits()
    names = {patch.name.removesuffix(".patch") for patch in patches}
    for key in edits["existing_tests"]:
        if key not in names and existing_test_edits(key, edits, LINE):
            raise PatchsetError(
                f'{UPSTREAM_EDITS_FILE.name}: [[existing_tests."{key}"]] names no patch of the {LINE} line\'s '
                "series: key it by the patch's name without .patch, or give the entry the lines "
                "(lines = [...]) whose series carry that patch"
            )
    count = 0
    for patch in patches:
        try:
            count += len(pull_request_edits(added_paths(patch), edits, patch.name.removesuffix(".patch")))
        except PatchsetError as err:
            raise PatchsetError(f"{patch.name}: {err}") from err
    return count


def check_trailers(patches: list[Patch]) -> None:
    seen_features: list[str] = []
    known = set(features_in_order(patches))
    for patch in patches:
        missing = [t for t in REQUIRED_TRAILERS if not patch.trailers.get(t)]
        if missing:
            raise PatchsetError(f"{patch.name} lacks the trailer(s) {', '.join(missing)}")
        if not patch.name.startswith(patch.feature + "/"):
            raise PatchsetError(f"{patch.name} has Feature: {patch.feature} but lives in another directory")
        named = {t.lstrip("!") for t in patch.when}
        unknown = sorted(named - known)
        if unknown:
            raise PatchsetError(f"{patch.name}: its condition names unknown feature(s) {', '.join(unknown)}")
        if patch.is_integration:
            check_integration_patch(patch)
            continue
        if "integration" in patch.depends:
            raise PatchsetError(f"{patch.name} depends on integration patches; a feature never does")
        for dep in patch.depends:
            if dep not in known:
                raise PatchsetError(f"{patch.name} depends on unknown feature {dep!r}")
            if dep not in seen_features and dep != patch.feature:
                raise PatchsetError(f"{patch.name} depends on {dep!r}, which comes later in the series")
        if patch.feature not in seen_features:
            seen_features.append(patch.feature)


def check_integration_patch(patch: Patch) -> None:
    """An integration patch names, in its condition, every feature it depends on (and no other present)."""
    if not patch.name.startswith("integration/") or patch.name.count("/") != 2:
        raise PatchsetError(f"{patch.name}: an integration patch lives in integration/<feature>+<feature>/")
    if not patch.when:
        raise PatchsetError(f"{patch.name}: an integration patch needs a series condition ('when: a b')")
    present = {t for t in patch.when if not t.startswith("!")}
    if set(patch.depends) != present:
        raise PatchsetError(
            f"{patch.name}: Depends ({', '.join(patch.depends) or 'none'}) must name exactly the features its "
            f"condition requires ({', '.join(sorted(present))})"
        )
    if not patch.trailers.get("Upstream-Status", "").startswith("Inappropriate"):
        raise PatchsetError(f"{patch.name}: an integration patch is never sent upstream (Upstream-Status: Inappropriate (...))")


def combos(patches: list[Patch]) -> list[tuple[str, frozenset[str]]]:
    """(label, feature set) that verify proves: each feature with its dependency closure, then all."""
    result = [(f, frozenset(dependency_closure(f, patches))) for f in features_in_order(patches)]
    result.append(("full series", frozenset(features_in_order(patches))))
    return result


def check_strict_apply(patches: list[Patch]) -> Path:
    tree = scratch_tree()
    apply_series(tree, full_selection(patches))
    return tree


def check_features_alone(patches: list[Patch], *, review_checks: bool = False, generated: bool = False) -> Iterator[str]:
    """Apply each feature alone with its dependency closure; yield one line per feature as it passes."""
    used: set[str] = set()
    for feature, closure in combos(patches)[:-1]:
        subset = select_patches(patches, closure)
        used.update(p.name for p in subset)
        what = f"feature {feature} (with {', '.join(sorted(closure - {feature})) or 'no dependencies'})"
        tree = scratch_tree()
        try:
            try:
                offsets = apply_series(tree, subset, allow_offset=True)
            except PatchsetError as err:
                raise PatchsetError(f"{what} does not apply on its own: {err}") from err
            if review_checks:
                require_review_checks(tree, what)
            gen_note = ""
            if generated and any(is_generated(p) for patch in subset for p in touched_paths(patch)):
                from pstool.generated import check_generated_from_source

                gen_note = "; " + check_generated_from_source(tree, feature).split(": ", 1)[1]
        finally:
            shutil.rmtree(tree, ignore_errors=True)
        glue = [p.name for p in subset if p.is_integration or p.when]
        yield (
            f"{feature}: applies alone with {', '.join(sorted(closure - {feature})) or 'no dependencies'}"
            f" ({len(subset)} patches{', conditional: ' + ', '.join(glue) if glue else ''};"
            f" {offsets} hunk(s) at an offset, exact context)"
            + (", review checks pass" if review_checks else "")
            + gen_note
        )
    full = {p.name for p in full_selection(patches)}
    dead = [p.name for p in patches if p.name not in full and p.name not in used]
    if dead:
        raise PatchsetError(f"no verified selection applies these patches (check their conditions): {', '.join(dead)}")


def require_review_checks(tree: Path, what: str) -> None:
    """Run upstream's review checks (``pstool.checks``) on ``tree``; any finding is an error."""
    from pstool.checks import run_checks

    findings = run_checks(tree)
    if findings:
        raise PatchsetError(f"upstream's review checks fail on {what}:\n" + "\n".join(f"  {f}" for f in findings))


def check_not_upstream(patches: list[Patch], base_tree: Path) -> None:
    # An integration patch is not upstream material, and one that withdraws a feature's lines
    # reverse-applies to the pristine base by construction: only features' patches are checked.
    for patch in (p for p in patches if not p.is_integration):
        proc = git(base_tree, "apply", "--check", "-R", "-", input=patch.body, check=False)
        if proc.returncode == 0:
            raise PatchsetError(f"{patch.name} reverse-applies to pristine upstream: it is already upstream")


_last = [time.monotonic()]


def _ok(message: str) -> None:
    """Print one passed step, with the seconds it took (where verify spends its time, in CI's log)."""
    now = time.monotonic()
    print(f"ok  [{now - _last[0]:4.0f}s] {message}", flush=True)
    _last[0] = now


def check_twins() -> None:
    from pstool import twins

    report = twins.check()
    if report.problems:
        raise PatchsetError("the lines have drifted apart:\n" + "\n".join(f"  {p}" for p in report.problems))
    together = sum(1 for row in report.lines if row.startswith("twins"))
    only = [row for row in report.lines if row.startswith("only")]
    _ok(f"twins: {together} patches together on every line since their last port, {len(only)} on one line on purpose")


def verify(*, generated: bool = True) -> int:
    _last[0] = time.monotonic()
    patches = check_hygiene()
    _ok(f"hygiene: {len(patches)} patches, each listed once, none unlisted")
    check_trailers(patches)
    _ok("trailers: Feature, Upstream-Status and Depends on every patch; dependencies come first")
    edits = check_upstream_edits(patches)
    _ok(f"pull-request edits: every new docs page has its toctree entry, every edit of existing tests its patch ({edits} edit(s) for the cover letters)")
    from pstool.hygiene import PENDING_FILE, check_process_references
    from pstool.paths import DOCS_ROOT, LINE, UPSTREAM_EDITS_FILE

    read, waiting = check_process_references(patches, DOCS_ROOT, UPSTREAM_EDITS_FILE)
    _ok(
        f"process references: none in {len(patches)} patches (messages and added lines), the cover letters' edits"
        f" or the product documents ({read} places read)"
        + (f"; {len(waiting)} pending in {PENDING_FILE} (another change is rewriting them)" if waiting else "")
    )
    check_twins()
    base = scratch_tree()
    try:
        check_not_upstream(patches, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    _ok("nothing already upstream")
    if generated:
        from pstool.generated import check_pristine

        _ok(f"{check_pristine()}")
    tree = check_strict_apply(patches)
    try:
        integ = [p.name for p in full_selection(patches) if p.is_integration]
        _ok(f"strict apply: full series ({len(full_selection(patches))} patches, {len(integ)} integration), no fuzz, no offset, no 3-way")
        from pstool.ledger import check_ledgers

        rows, looked_up = check_ledgers(DOCS_ROOT, tree, LINE)
        _ok(f"guarantees ledgers: {rows} rows, each whole with a unique id; {looked_up} named tests exist on the {LINE} line")
        require_review_checks(tree, "the whole series")
        from pstool.checks import CHECKS

        _ok(f"upstream's review checks on the whole series: {', '.join(CHECKS)}")
        for line in check_features_alone(patches, review_checks=True, generated=generated):
            _ok(f"{line}")
        from pstool.deps import check_patch_dependencies, load_pending

        for line in check_patch_dependencies(patches, tree, load_pending(DOCS_ROOT)):
            _ok(f"patch dependencies: {line}")
        patches = full_selection(patches)
        gen_touched = sorted({p for patch in patches for p in touched_paths(patch) if is_generated(p)})
        forbidden = [p for p in gen_touched if "/ui/dist/" in p or p.endswith("git_version")]
        if forbidden:
            raise PatchsetError(f"patches touch built files no generator here reproduces: {', '.join(forbidden)}")
        if gen_touched and generated:
            from pstool.generated import check_generated

            for line in check_generated(tree, gen_touched):
                _ok(f"{line}")
        elif gen_touched:
            print(f"--  generated files not re-checked (--no-generated): {', '.join(gen_touched)}")
        from pstool.layout import UI_TREE_DIR

        if any(p.startswith(UI_TREE_DIR) for patch in patches for p in touched_paths(patch)):
            from pstool import ui

            _ok(f"{ui.lint(tree)}")
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    print("verify: passed")
    return 0
