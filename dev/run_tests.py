"""Run the test suite: one pytest session per directory under tests/, then one summary line.

Airflow reads its configuration once per process, and each feature's conftest points it at its own
AIRFLOW_HOME and database, so every directory runs in a fresh interpreter. Extra arguments are
passed to every session (e.g. ``-m "not e2e"``). Exit status: 0 only if no session failed and at
least one test ran.

The release line is ``PATCHSET_LINE`` (``make test LINE=3.4``), run with that line's venv. Every
directory runs on every line; a test of pstool's own mechanics or of CI's scripts, the same code on
every line (marker ``line_independent``: most of ``tests/tooling``, ``tests/ui/test_ui_lint.py``), runs
in one line's session only: the line ``PATCHSET_LINE_INDEPENDENT_ON`` names, by default the default
line (so a plain ``make test`` runs them); the other lines' sessions skip them with that reason.
``<line>:<path>,...`` moves only those under the paths (relative to ``tests/``). CI (.ci/run) moves
part of them to the 3.4 line, taking them off the 3.3 line's chain, the longer one.
``PATCHSET_TEST_ORDER`` (directory names, comma-separated) runs those directories first, in that
order, and the rest in the default order; an unknown or repeated name is a usage error (exit 2).
A line's session prepares everything it needs itself (its pinned files, its unpatched venv): it
never relies on what another line's session fetched or built (.ci/run runs each line in a clone of
its own to prove it).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from pstool.paths import DEFAULT_LINE, LINE

REPO = Path(__file__).resolve().parents[1]
ORDER = ["tooling", "upstream_unit", "aip97_core", "aip97_worker", "aip122", "asset_emit", "providers", "demo", "image"]


class UsageError(Exception):
    """A setting run_tests cannot follow: it names what is wrong, and no test runs."""


def directories(order: str | None = None, tests: Path = REPO / "tests") -> list[Path]:
    """The test directories, in the order they run: ``order`` (``PATCHSET_TEST_ORDER``: directory names,
    comma-separated) first, then the others in the default order (:data:`ORDER`, then by name).

    CI gives the 3.4 line an order of its own, so that the two lines, side by side on two cores, are
    not in the same wait-bound directory (Celery worker restarts, the retry storm) at the same time.
    """
    found = [p for p in sorted(tests.iterdir()) if p.is_dir() and any(p.glob("test_*.py"))]
    wanted = [name.strip() for name in (order or "").split(",") if name.strip()]
    unknown = sorted(set(wanted) - {p.name for p in found})
    if unknown:
        raise UsageError(
            f"PATCHSET_TEST_ORDER={order!r}: no test directory {', '.join(unknown)} under {tests} "
            f"(there are: {', '.join(p.name for p in found)})"
        )
    repeated = sorted({name for name in wanted if wanted.count(name) > 1})
    if repeated:
        raise UsageError(f"PATCHSET_TEST_ORDER={order!r}: {', '.join(repeated)} named more than once")
    rank = wanted + [name for name in ORDER if name not in wanted]
    return sorted(found, key=lambda p: (rank.index(p.name) if p.name in rank else len(rank), p.name))


def prepare_unpatched_venv() -> None:
    """Build the line's unpatched upstream venv the tests compare against, before any test's timeout
    runs (``pstool.unpatched``: it fetches the line's pinned wheels itself). Built once per machine, shared by every checkout."""
    from pstool.unpatched import unpatched_venv

    for providers in (False, True):  # tests/operations and tests/upstream_unit use the one with providers
        t0 = time.monotonic()
        venv = unpatched_venv(LINE, providers=providers)
        print(f"unpatched {LINE} venv{' with providers' if providers else ''}: {venv} ({time.monotonic() - t0:.0f}s)", flush=True)


def prepare_images(argv: list[str]) -> None:
    """Build (or find cached) this line's stand-in base and patched image before tests/image runs.

    What ``make base-image`` and ``make image BASE=localhost/airflow-standin:<release>`` build, from
    the wheels ``make install`` built, outside any test's timeout (a cold build takes minutes). Not
    when the session's markers leave the container tests out. A failure is printed; the tests'
    fixtures then fail with it.
    """
    if any("not e2e" in arg or "not image" in arg for arg in argv):
        return
    from pstool import PatchsetError
    from pstool.image import base_image, image

    t0 = time.monotonic()
    try:
        standin = base_image(quiet=True)
        tag = image(base=standin, build_wheels=False, quiet=True)
    except PatchsetError as err:
        print(f"images: {err}", flush=True)
        return
    print(f"images: {standin}, {tag} ({time.monotonic() - t0:.0f}s)", flush=True)


def _children_cpu() -> float:
    """CPU seconds (user and system) of the finished processes this one waited for, and of theirs:
    a directory's pytest session with the Airflow components and helpers it started and stopped
    (a process nothing waited for, e.g. one orphaned by a kill, is not counted)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str]) -> int:
    totals = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    broken: list[str] = []
    started = time.monotonic()
    independent_on = os.environ.get("PATCHSET_LINE_INDEPENDENT_ON") or DEFAULT_LINE
    print(
        f"release line {LINE}: {sys.executable}; line-independent tests: "
        f"PATCHSET_LINE_INDEPENDENT_ON={independent_on} (the rest: the {DEFAULT_LINE} line's session)",
        flush=True,
    )
    try:
        ordered = directories(os.environ.get("PATCHSET_TEST_ORDER"))
    except UsageError as err:
        print(f"run_tests: {err}", file=sys.stderr)
        return 2
    prepare_unpatched_venv()
    for directory in ordered:
        if directory.name == "image":
            prepare_images(argv)
        with tempfile.NamedTemporaryFile(suffix=".xml") as report:
            t0 = time.monotonic()
            cpu0 = _children_cpu()
            print(f"\n===== tests/{directory.name} ===== (at {time.monotonic() - started:.0f}s of the suite)", flush=True)
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", str(directory), f"--junitxml={report.name}", *argv],
                cwd=REPO,
                check=False,
            )
            counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
            if Path(report.name).stat().st_size:
                for suite in ET.parse(report.name).getroot().iter("testsuite"):
                    tests = int(suite.get("tests", 0))
                    failed = int(suite.get("failures", 0))
                    errors = int(suite.get("errors", 0))
                    skipped = int(suite.get("skipped", 0))
                    counts["failed"] += failed
                    counts["errors"] += errors
                    counts["skipped"] += skipped
                    counts["passed"] += tests - failed - errors - skipped
            for key, value in counts.items():
                totals[key] += value
            if proc.returncode not in (0, 5) or counts["failed"] or counts["errors"]:
                broken.append(directory.name)
            print(f"----- tests/{directory.name}: {counts['passed']} passed, {counts['failed']} failed, "
                  f"{counts['skipped']} skipped, {counts['errors']} errors in {time.monotonic() - t0:.0f}s "
                  f"({_children_cpu() - cpu0:.0f}s CPU)", flush=True)
    minutes = (time.monotonic() - started) / 60
    print(f"\nsuite took {minutes:.1f} min" + (f"; failing: {', '.join(broken)}" if broken else ""))
    failed = totals["failed"] + totals["errors"]
    print(f"{totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
    return 1 if failed or broken or totals["passed"] == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
