"""Series conditions, integration patches, per-feature selections and export-upstream contents.

A synthetic series mirrors the real one: two independent features (``alpha`` and ``gamma``) that
claim one slot of one file (as asset-emit and aip-97 both claim the "3.4.0" heads-map entry), two
integration patches that reconcile them only when both are selected, and ``delta`` that depends
on ``gamma`` (as aip-122 depends on aip-97).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.line_independent  # pstool itself, on the default line's pristine base

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

from pstool import PatchsetError  # noqa: E402
from pstool.series import (  # noqa: E402
    Patch,
    condition_holds,
    dependency_closure,
    load_series,
    parse_when,
    read_series_entries,
    select_patches,
)

STATE = "airflow-core/src/airflow/utils/state.py"
SLOT = '    SCHEDULED = "scheduled"\n'
INTEG = "integration/alpha+gamma"


def _commit(pstool: Any, path: str, transform, subject: str, trailers: str) -> None:
    target = pstool.tree / path
    target.write_text(transform(target.read_text()))
    pstool.git("add", path)
    pstool.git("commit", "-q", "-m", f"{subject}\n\nWhy it matters.\n\n{trailers}\n")


def _integration(name: str) -> str:
    return (
        "Feature: integration\nUpstream-Status: Inappropriate (integration of alpha and gamma)\n"
        f"Depends: alpha, gamma\nSeries-When: alpha gamma\nPatch-Filename: {INTEG}/{name}.patch"
    )


@pytest.fixture
def coupled(pstool: Any) -> Any:
    """alpha, withdraw (alpha+gamma), gamma, register (alpha+gamma), delta (depends on gamma)."""
    pstool.run("checkout")
    _commit(pstool, STATE, lambda t: t.replace(SLOT, SLOT + "    # slot: alpha\n", 1), "Claim the slot for alpha",
            "Feature: alpha\nUpstream-Status: Pending (test)\nDepends: none")
    _commit(pstool, STATE, lambda t: t.replace("    # slot: alpha\n", "", 1), "Withdraw alpha's claim", _integration("0001-withdraw"))
    _commit(pstool, STATE, lambda t: t.replace(SLOT, SLOT + "    # slot: gamma\n", 1), "Claim the slot for gamma",
            "Feature: gamma\nUpstream-Status: Pending (test)\nDepends: none")
    _commit(pstool, STATE, lambda t: t.replace("    # slot: gamma\n", "    # slot: alpha, gamma\n", 1), "Register both",
            _integration("0002-register"))
    _commit(pstool, "shared/state/src/airflow_shared/state/__init__.py", lambda t: t + "\n\nDELTA_MARKER = 1\n",
            "Add delta", "Feature: delta\nUpstream-Status: Pending (test)\nDepends: gamma")
    pstool.run("export")
    return pstool


def test_parse_when_and_condition_holds() -> None:
    assert parse_when("asset-emit aip-97 !aip-122") == ("asset-emit", "aip-97", "!aip-122")
    assert condition_holds(("a", "!b"), {"a"}) and not condition_holds(("a", "!b"), {"a", "b"})
    assert not condition_holds(("a", "c"), {"a"})
    for bad in ("", "a !a", "A_B"):
        with pytest.raises(PatchsetError):
            parse_when(bad)


def test_export_writes_conditions_and_checkout_round_trips(coupled: Any) -> None:
    entries = dict(read_series_entries(coupled.patches / "series"))
    assert entries[f"{INTEG}/0001-withdraw.patch"] == ("alpha", "gamma")
    assert entries[f"{INTEG}/0002-register.patch"] == ("alpha", "gamma")
    assert entries[next(n for n in entries if n.startswith("gamma/"))] == ()
    for name in (f"{INTEG}/0001-withdraw.patch", f"{INTEG}/0002-register.patch"):
        text = (coupled.patches / name).read_text()
        assert "Series-When" not in text and "Patch-Filename" not in text
    before = {p: p.read_bytes() for p in sorted(coupled.patches.rglob("*")) if p.is_file()}
    coupled.run("checkout")  # the full selection: both features, both integration patches
    assert "    # slot: alpha, gamma\n" in (coupled.tree / STATE).read_text()
    assert "patches/ is up to date" in coupled.run("export").stdout
    assert before == {p: p.read_bytes() for p in sorted(coupled.patches.rglob("*")) if p.is_file()}


def test_selection_applies_integration_patches_only_with_both_features(coupled: Any) -> None:
    patches = load_series(coupled.patches)
    names = lambda features: [p.name.split("/", 1)[0] if not p.is_integration else p.name for p in select_patches(patches, features)]  # noqa: E731
    assert names({"alpha"}) == ["alpha"]
    assert names({"gamma", "delta"}) == ["gamma", "delta"]
    assert names({"alpha", "gamma", "delta"}) == ["alpha", f"{INTEG}/0001-withdraw.patch", "gamma", f"{INTEG}/0002-register.patch", "delta"]
    assert dependency_closure("delta", patches) == {"gamma", "delta"}


def test_verify_proves_each_feature_alone_and_the_full_series(coupled: Any) -> None:
    out = coupled.run("verify", "--no-generated").stdout
    assert "alpha: applies alone with no dependencies (1 patches" in out
    assert "gamma: applies alone with no dependencies (1 patches" in out
    assert "delta: applies alone with gamma (2 patches" in out
    assert "full series (5 patches, 2 integration)" in out


def test_verify_fails_when_a_feature_needs_the_other_to_apply(coupled: Any) -> None:
    # gamma rewritten on top of alpha's claim (what aip-97 was before it was decoupled): the full
    # series applies without integration patches, but gamma alone no longer does.
    gamma = next(coupled.patches.glob("gamma/*.patch"))
    assert "+    # slot: gamma\n" in gamma.read_text()
    series = (coupled.patches / "series").read_text()
    for name in ("0001-withdraw", "0002-register"):
        series = series.replace(f"{INTEG}/{name}.patch  when: alpha gamma\n", "")
        (coupled.patches / f"{INTEG}/{name}.patch").unlink()
    (coupled.patches / "series").write_text(series)
    coupled.git("checkout", "-q", "-B", "rewrite", "refs/patches/upstream-base")
    coupled.git("am", "-q", str(next(coupled.patches.glob("alpha/*.patch"))))
    state = coupled.tree / STATE
    state.write_text(state.read_text().replace("    # slot: alpha\n", "    # slot: alpha\n    # slot: gamma\n", 1))
    coupled.git("commit", "-qam", "Claim the slot for gamma\n\nWhy.\n\nFeature: gamma\nUpstream-Status: Pending (test)\nDepends: none")
    gamma.write_text(coupled.git("format-patch", "--stdout", "--zero-commit", "-1", "HEAD"))
    proc = coupled.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1
    assert "feature gamma (with no dependencies) does not apply on its own" in proc.stderr


def test_verify_rejects_an_integration_patch_without_a_matching_condition(coupled: Any) -> None:
    series = coupled.patches / "series"
    text = series.read_text()
    series.write_text(text.replace(f"{INTEG}/0002-register.patch  when: alpha gamma", f"{INTEG}/0002-register.patch  when: gamma"))
    proc = coupled.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1 and "must name exactly the features its condition requires" in proc.stderr
    series.write_text(text.replace(f"{INTEG}/0002-register.patch  when: alpha gamma", f"{INTEG}/0002-register.patch"))
    proc = coupled.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1 and "needs a series condition" in proc.stderr


def test_export_upstream_has_only_the_feature_and_its_dependencies(coupled: Any) -> None:
    for feature, expected, cover_says in (
        ("gamma", ["Claim the slot for gamma"], "Depends on: nothing"),
        ("delta", ["Claim the slot for gamma", "Add delta"], "Depends on: gamma."),
        ("alpha", ["Claim the slot for alpha"], "Depends on: nothing"),
    ):
        out_dir = Path(coupled.run("export-upstream", feature).stdout.strip())
        files = sorted(out_dir.glob("*.patch"))
        assert cover_says in files[0].read_text()
        subjects = [next(ln for ln in f.read_text().splitlines() if ln.startswith("Subject:")) for f in files[1:]]
        assert [s.split("] ", 1)[1] for s in subjects] == expected
        assert [s.split("] ", 1)[0] for s in subjects] == [f"Subject: [PATCH {i}/{len(expected)}" for i in range(1, len(expected) + 1)]
        assert not any("Withdraw" in s or "Register both" in s for s in subjects)
        fresh = coupled.root / f"fresh-{feature}"
        subprocess.run(["git", "clone", "-q", str(coupled.tree), str(fresh)], check=True)
        coupled.git("checkout", "-q", "refs/tags/upstream/3.3.2", cwd=fresh)
        for f in files[1:]:  # exactly at the base: no offset, no fuzz
            check = subprocess.run(["git", "apply", "--check", "-v", str(f)], cwd=fresh, capture_output=True, text=True, check=False)
            assert check.returncode == 0 and "offset" not in check.stderr, check.stderr
            coupled.git("am", "-q", str(f), cwd=fresh)


def _real() -> list[Patch]:
    return load_series(REPO / "lines" / "3.3" / "patches")


def test_real_series_features_are_independent_of_asset_emit() -> None:
    patches = _real()
    for feature in ("asset-emit", "aip-97"):
        assert dependency_closure(feature, patches) == {feature}
    for provider in ("aip-97-cncf-kubernetes", "aip-97-celery", "aip-97-amazon", "aip-122"):
        assert dependency_closure(provider, patches) == {provider, "aip-97"}
    integ = [p for p in patches if p.is_integration]
    assert integ and all(p.when == ("asset-emit", "aip-97") for p in integ)
    for feature in ("aip-97", "aip-122", "asset-emit"):
        chosen = select_patches(patches, dependency_closure(feature, patches))
        assert not any(p.is_integration for p in chosen)
        assert ("asset-emit" in {p.feature for p in chosen}) == (feature == "asset-emit")
