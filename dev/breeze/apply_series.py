#!/usr/bin/env python3
"""Apply one feature's upstream series to an Apache Airflow checkout, ready for Breeze.

    python3 dev/breeze/apply_series.py --checkout ~/src/airflow aip-122
    python3 dev/breeze/apply_series.py --checkout ~/src/airflow --check        # only check the checkout

Upstream pull requests come from the 3.4 line (``lines/README.md``), so this takes the 3.4 line's
series unless ``--line`` (or ``PATCHSET_LINE``) names another. Steps, each of which stops with a
clear error and changes nothing when it fails:

1. The checkout is a git work tree, with no uncommitted change (staged, unstaged or untracked
   outside ``files/``), and its HEAD is the series' base commit: the upstream release commit named
   in the line's ``lines/<line>/upstream.lock`` (``[upstream] commit``; ``--base-commit``
   overrides it).
2. The feature's series is exported with ``pstool export-upstream`` (or read from ``--series``) and
   applied with ``git am`` (no 3-way). A patch that does not apply aborts the ``git am``, leaving the
   checkout at the base commit.
3. ``files/airflow-breeze-config/variables.env`` in the checkout gets a marked block with the
   settings that turn the features on (``dev/breeze/airflow-breeze-config/variables.env``): Breeze's
   ``scripts/in_container/configure_environment.sh`` sources that file (with ``allexport``) every
   time it enters its container, ``breeze shell``, ``breeze start-airflow`` and ``breeze testing``
   alike. The contributor's own lines outside the block are kept. A block an older version of this
   helper wrote into ``environment_variables.env`` (a file Breeze never reads) is removed.
4. The example Dags of the feature and the features it depends on (``examples/dags``) are copied to
   ``files/dags/airflow_patchset/``: ``configure_environment.sh`` points ``[core] dags_folder`` at
   ``/files/dags`` (the checkout's ``files/dags``) for ``breeze start-airflow``.

Stdlib only: it runs with any Python 3.11+, outside the project's virtualenv.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG_SOURCE = Path(__file__).resolve().parent / "airflow-breeze-config" / "variables.env"
#: The file Breeze sources on entering its container (scripts/in_container/configure_environment.sh).
CONFIG_TARGET = Path("files") / "airflow-breeze-config" / "variables.env"
#: Where earlier versions of this helper wrote their block; Breeze does not read it.
STALE_CONFIG_TARGET = Path("files") / "airflow-breeze-config" / "environment_variables.env"
#: ``[core] dags_folder`` in a Breeze container is /files/dags, the checkout's files/dags.
DAGS_TARGET = Path("files") / "dags" / "airflow_patchset"
EXAMPLE_DAGS = REPO / "examples" / "dags"
#: The line upstream pull requests come from (lines/README.md).
DEFAULT_LINE = "3.4"
#: Example Dags (examples/dags) by the feature they show; a feature's dependencies' Dags come too.
FEATURE_DAGS = {
    "asset-emit": ("asset_emit_*.py",),
    "aip-97": ("aip97_*.py",),
    "aip-122": ("aip122_*.py",),
}
BEGIN = "# >>> airflow-patchset (managed by dev/breeze/apply_series.py; edits inside are replaced) >>>"
END = "# <<< airflow-patchset <<<"


class CheckoutError(Exception):
    """The checkout is not where the series can be applied, or applying it failed."""


def _git(checkout: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["git", "-C", str(checkout), *args], check=False, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise CheckoutError(f"git {' '.join(args)} failed in {checkout}:\n{proc.stderr.strip()}")
    return proc


def selected_line(line: str | None) -> str:
    """``--line``, else ``PATCHSET_LINE``, else the line upstream pull requests come from."""
    return line or os.environ.get("PATCHSET_LINE") or DEFAULT_LINE


def lock_base_commit(line: str) -> str:
    """The release commit the series of ``line`` is based on."""
    sys.path.insert(0, str(REPO / "dev"))
    from pstool.paths import LINES_DIR

    lock = LINES_DIR / line / "upstream.lock"
    if not lock.is_file():
        raise CheckoutError(f"no release line {line!r} in this repository ({lock} is missing)")
    return tomllib.loads(lock.read_text())["upstream"]["commit"]


def check_checkout(checkout: Path, base_commit: str) -> None:
    """Raise :class:`CheckoutError` unless ``checkout`` is a clean work tree at ``base_commit``."""
    if not checkout.is_dir():
        raise CheckoutError(f"{checkout} does not exist")
    if _git(checkout, "rev-parse", "--is-inside-work-tree", check=False).stdout.strip() != "true":
        raise CheckoutError(f"{checkout} is not a git work tree")
    in_progress = _git(checkout, "rev-parse", "--git-path", "rebase-apply").stdout.strip()
    if (checkout / in_progress).exists():
        raise CheckoutError(f"{checkout} has a git am or rebase in progress; finish or abort it first")
    dirty = [
        line for line in _git(checkout, "status", "--porcelain", "--untracked-files=all").stdout.splitlines()
        if not line[3:].startswith("files/")
    ]
    if dirty:
        shown = "\n".join(f"  {line}" for line in dirty[:10])
        raise CheckoutError(
            f"{checkout} has uncommitted changes; commit or stash them first:\n{shown}"
            + (f"\n  ... and {len(dirty) - 10} more" if len(dirty) > 10 else "")
        )
    head = _git(checkout, "rev-parse", "HEAD").stdout.strip()
    if head != base_commit:
        raise CheckoutError(
            f"{checkout} is at {head[:12]}, not at the series' base commit {base_commit[:12]}.\n"
            f"Start a branch there first:  git -C {checkout} checkout -b <feature> {base_commit}"
        )


def export_series(feature: str, line: str) -> Path:
    proc = subprocess.run(
        [sys.executable, "-m", "pstool", "export-upstream", feature],
        check=False,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO / "dev"), "PATCHSET_LINE": line},
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise CheckoutError(f"pstool export-upstream {feature} failed:\n{proc.stderr.strip()}")
    return Path(proc.stdout.strip().splitlines()[-1])


def series_patches(series_dir: Path) -> list[Path]:
    patches = sorted(p for p in series_dir.glob("[0-9][0-9][0-9][0-9]-*.patch") if not p.name.startswith("0000-"))
    if not patches:
        raise CheckoutError(f"{series_dir} holds no patches (expected 0001-*.patch, ...)")
    return patches


def apply_patches(checkout: Path, patches: list[Path]) -> None:
    proc = _git(checkout, "am", "--no-3way", *map(str, patches), check=False)
    if proc.returncode != 0:
        _git(checkout, "am", "--abort", check=False)
        raise CheckoutError(f"git am failed; the checkout was left at the base commit:\n{proc.stdout.strip()}\n{proc.stderr.strip()}")


def _without_block(text: str) -> list[str]:
    kept: list[str] = []
    inside = False
    for line in text.splitlines():
        if line == BEGIN:
            inside = True
        elif line == END:
            inside = False
        elif not inside:
            kept.append(line)
    return kept


def write_breeze_config(checkout: Path) -> Path:
    """Write the managed block into the file Breeze sources; drop one left where Breeze never looks."""
    target = checkout / CONFIG_TARGET
    target.parent.mkdir(parents=True, exist_ok=True)
    kept = _without_block(target.read_text()) if target.exists() else []
    block = [BEGIN, *CONFIG_SOURCE.read_text().rstrip("\n").splitlines(), END]
    target.write_text("\n".join([*kept, *block]) + "\n")
    stale = checkout / STALE_CONFIG_TARGET
    if stale.exists() and BEGIN in stale.read_text():
        rest = _without_block(stale.read_text())
        if any(line.strip() for line in rest):
            stale.write_text("\n".join(rest) + "\n")
        else:
            stale.unlink()
    return target


def feature_closure(feature: str, line: str) -> list[str]:
    """``feature`` and the features it depends on, as the line's series declares them."""
    sys.path.insert(0, str(REPO / "dev"))
    from pstool import PatchsetError
    from pstool.paths import for_line
    from pstool.series import dependency_closure, load_series

    # PATCHSET_PATCHES points pstool at another series (tests/tooling does); follow it, as the export did.
    patches_dir = Path(os.environ.get("PATCHSET_PATCHES") or for_line(line).patches_dir)
    try:
        return sorted(dependency_closure(feature, load_series(patches_dir)))
    except PatchsetError as err:
        raise CheckoutError(f"cannot read the features {feature} depends on: {err}") from err


def copy_example_dags(checkout: Path, features: list[str]) -> list[str]:
    """Copy the example Dags of ``features`` to the checkout's ``files/dags/airflow_patchset``."""
    target = checkout / DAGS_TARGET
    if target.exists():
        shutil.rmtree(target)
    copied = []
    for feature in features:
        for pattern in FEATURE_DAGS.get(feature, ()):
            for dag in sorted(EXAMPLE_DAGS.glob(pattern)):
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(dag, target / dag.name)
                copied.append(dag.name)
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("feature", nargs="?", help="feature to apply, e.g. aip-122")
    parser.add_argument("--checkout", type=Path, required=True, help="the upstream Airflow checkout")
    parser.add_argument("--line", help=f"release line whose series to apply (default: PATCHSET_LINE, else {DEFAULT_LINE})")
    parser.add_argument("--series", type=Path, help="an exported series directory (default: export it now)")
    parser.add_argument("--base-commit", help="expected HEAD of the checkout (default: upstream.lock's commit)")
    parser.add_argument("--check", action="store_true", help="only check that the checkout is clean and at the base")
    args = parser.parse_args(argv)
    line = selected_line(args.line)
    try:
        base = args.base_commit or lock_base_commit(line)
        check_checkout(args.checkout, base)
        if args.check:
            print(f"{args.checkout}: clean, at the series' base commit {base[:12]} (the {line} line)")
            return 0
        if not args.feature and not args.series:
            parser.error("name a feature (or --series DIR)")
        patches = series_patches(args.series or export_series(args.feature, line))
        apply_patches(args.checkout, patches)
        config = write_breeze_config(args.checkout)
        dags = copy_example_dags(args.checkout, feature_closure(args.feature, line) if args.feature else [])
    except CheckoutError as err:
        print(f"apply_series: error: {err}", file=sys.stderr)
        return 1
    print(f"applied {len(patches)} patch(es) of the {line} line to {args.checkout}; Breeze settings in {config}")
    if dags:
        print(f"example Dags in {args.checkout / DAGS_TARGET}: {', '.join(dags)}")
    print("next: breeze start-airflow --backend postgres --executor LocalExecutor   (dev/breeze/README.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
