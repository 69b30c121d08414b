"""Command line: ``python -m pstool <command>`` (run with ``PYTHONPATH=dev``; see the Makefile)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pstool import PatchsetError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pstool", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="download the pinned upstream files and verify their sha256")
    p = sub.add_parser("checkout", help="materialize build/<line>/tree: pristine base commit + the series")
    p.add_argument("--tree", type=Path)
    p = sub.add_parser("export", help="rewrite lines/<line>/patches/ from the tree's commits")
    p.add_argument("--tree", type=Path)
    p.add_argument("--check", action="store_true", help="fail if any byte of patches/ would change")
    p = sub.add_parser("verify", help="series hygiene, trailers, strict apply, per-feature apply, generated files")
    p.add_argument("--no-generated", action="store_true", help="skip re-running the generators")
    p.add_argument(
        "--recheck",
        action="store_true",
        help="run the generator and UI lint checks even where this machine has a passed stamp for the same content",
    )
    p = sub.add_parser("ledger", help="check the AIP docs' guarantees ledgers against the suite and build/<line>/tree")
    p.add_argument("--tree", type=Path, help="the full series' tree for in-patch tests (default build/<line>/tree)")
    sub.add_parser("hygiene", help="refuse this project's issue numbers, rounds, 'asked by' in the patches and documents")
    p = sub.add_parser("check", help="run upstream's review checks (pstool.checks) on a materialized tree")
    p.add_argument("--tree", type=Path)
    p.add_argument("--only", action="append", help="run only this check (repeatable)")
    p = sub.add_parser("build", help="build patched wheels with a local version label into dist/")
    p.add_argument("--tree", type=Path)
    p = sub.add_parser("install", help="create or refresh .venv with the patched wheels and test dependencies")
    p.add_argument("--tree", type=Path)
    p = sub.add_parser("export-upstream", help="write a PR-ready format-patch series for one feature")
    p.add_argument("feature")
    p.add_argument("-o", "--output", type=Path)
    p = sub.add_parser("drift", help="apply the series to a newer upstream release and classify each patch")
    p.add_argument("version", help="apache-airflow-core version to check against, e.g. 3.3.3")
    p.add_argument("--from-dir", type=Path, help="use wheels from this directory instead of the index")
    p = sub.add_parser("regenerate", help="re-run upstream's generators in the tree (task-sdk models, REST spec)")
    p.add_argument("--tree", type=Path)
    p = sub.add_parser("port", help="carry one commit of a line's tree into the other lines' trees (3-way), re-export")
    p.add_argument("--from", dest="source", help="the line whose tree holds the commit")
    p.add_argument("--commit", help="a fixup! commit, or a new patch's commit, in build/<line>/tree")
    p.add_argument("--to", action="append", help="the target line (repeatable; default: every other line)")
    p.add_argument("--continue", dest="resume", action="store_true", help="resume a port stopped on a conflict")
    p = sub.add_parser("twins", help="each patch's twins on the other lines; what changed on one line only")
    p.add_argument("--accept", nargs="+", metavar="PATCH", help="record these patches' versions on every line as together")
    p.add_argument("--only", nargs="+", metavar=("LINE", "PATCH"), help="declare patches only LINE carries (with --reason)")
    p.add_argument("--forget", nargs="+", metavar="PATCH", help="drop the record of patches no line carries any more")
    p.add_argument("--reason", default="", help="why a change or a patch is on one line only")
    p = sub.add_parser("base-image", help="build the stand-in for the official image (localhost/airflow-standin:<release>)")
    p.add_argument("--refresh", action="store_true", help="debootstrap and build again even if the inputs are unchanged")
    p = sub.add_parser("image", help="build the patched image (airflow-patchset:<release>-<label>) with Docker or Podman")
    p.add_argument("--base", help="the base image (default: the official image of the line's release)")
    p.add_argument(
        "--provider-changes",
        default="",
        help="allow a patched provider of another version than the base's: upgrade, downgrade or both",
    )
    p.add_argument("--tag", help="tag the image so instead of airflow-patchset:<release>-<label>")
    p.add_argument("--no-wheels", action="store_true", help="use the wheels in the dist directory as they are")
    p = sub.add_parser("release", help="bump every line's label (ps.N+1), write CHANGELOG.md, commit and tag")
    p.add_argument("--dry-run", action="store_true", help="print the changelog entry; change nothing")
    p.add_argument("--date", help="the release date (default: today, UTC)")
    args = parser.parse_args(argv)

    try:
        if args.command == "fetch":
            from pstool.lock import fetch
            from pstool.ui import fetch_tools

            fetch()
            for name, path in fetch_tools().items():
                print(f"ok  {path.name}  ({name}, UI toolchain)")
        elif args.command == "checkout":
            from pstool.tree import checkout

            checkout(args.tree)
        elif args.command == "export":
            from pstool.tree import export

            changed = export(args.tree, check=args.check)
            if args.check and changed:
                print("patches/ is not what the tree exports; these would change:", file=sys.stderr)
                for name in changed:
                    print(f"  {name}", file=sys.stderr)
                return 1
            print("patches/ is up to date" if not changed else f"rewrote {len(changed)} file(s): {', '.join(changed)}")
        elif args.command == "verify":
            from pstool.verify import verify

            if args.recheck:
                os.environ["PATCHSET_RECHECK"] = "1"
            return verify(generated=not args.no_generated)
        elif args.command == "ledger":
            from pstool.ledger import check_ledgers
            from pstool.paths import DOCS_ROOT, LINE, tree_dir

            tree = args.tree or tree_dir()
            if not (tree / ".git").exists():
                raise PatchsetError(f"{tree} is not a checkout: run make checkout (LINE={LINE}) first")
            rows, looked_up = check_ledgers(DOCS_ROOT, tree, LINE)
            print(f"guarantees ledgers: {rows} rows; {looked_up} named tests exist on the {LINE} line ({tree})")
        elif args.command == "hygiene":
            from pstool.hygiene import PENDING_FILE, check_process_references
            from pstool.paths import DOCS_ROOT, UPSTREAM_EDITS_FILE
            from pstool.series import load_series

            read, waiting = check_process_references(load_series(), DOCS_ROOT, UPSTREAM_EDITS_FILE)
            for ref in waiting:
                print(f"pending  {ref}")
            print(f"process references: none in {read} places read ({len(waiting)} pending in {PENDING_FILE})")
        elif args.command == "check":
            from pstool.checks import CHECKS, run_checks
            from pstool.paths import tree_dir

            unknown = sorted(set(args.only or ()) - set(CHECKS))
            if unknown:
                raise PatchsetError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECKS)}")
            findings = run_checks(args.tree or tree_dir(), args.only)
            for finding in findings:
                print(finding)
            print(f"{len(findings)} finding(s) from {', '.join(args.only or CHECKS)}")
            return 1 if findings else 0
        elif args.command == "build":
            from pstool.build import build

            for path in build(args.tree):
                print(path)
        elif args.command == "install":
            from pstool.venv import install

            install(args.tree)
        elif args.command == "export-upstream":
            from pstool.upstream import export_upstream

            print(export_upstream(args.feature, args.output))
        elif args.command == "drift":
            from pstool.drift import drift

            return drift(args.version, args.from_dir)
        elif args.command == "regenerate":
            from pstool.generated import regenerate

            regenerate(args.tree)
        elif args.command == "port":
            from pstool.port import port, resume

            if args.resume:
                summary = resume()
            elif args.source and args.commit:
                summary = port(args.source, args.commit, args.to)
            else:
                raise PatchsetError("port needs --from LINE --commit SHA, or --continue")
            for row in summary:
                print(row)
            print("ported: commit lines/*/patches and lines/twins.toml together (one commit)")
        elif args.command == "twins":
            from pstool import twins

            if args.accept:
                twins.accept(args.accept, args.reason)
            elif args.only:
                twins.declare_only(args.only[0], args.only[1:], args.reason)
            elif args.forget:
                twins.forget(args.forget)
            report = twins.check()
            for row in report.lines:
                print(f"ok  {row}")
            for problem in report.problems:
                print(f"!!  {problem}", file=sys.stderr)
            return 1 if report.problems else 0
        elif args.command == "base-image":
            from pstool.image import base_image

            base_image(refresh=args.refresh)
        elif args.command == "release":
            from pstool.release import release

            release(dry_run=args.dry_run, date=args.date)
        elif args.command == "image":
            from pstool.image import image
            from pstool.paths import LINE
            from pstool.releases import check_label

            # Before anything is built: a released label is never given to another series.
            print(f"image: label {check_label(LINE)}", flush=True)
            image(
                base=args.base or None,
                provider_changes=args.provider_changes,
                tag=args.tag,
                build_wheels=not args.no_wheels,
            )
    except PatchsetError as err:
        print(f"pstool {args.command}: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
