"""Project-wide pytest settings: markers, the repository, and which tests this line can run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# What each test directory exercises. On a line whose series lacks one of these features (or is
# still porting it, see tests/lines.py) the directory's tests are skipped, with the reason.
# A single test may name more with @pytest.mark.requires_feature("...").
DIRECTORY_FEATURES: dict[str, tuple[str, ...]] = {
    "aip97_core": ("aip-97",),
    "aip97_worker": ("aip-97",),
    "aip122": ("aip-97", "aip-122"),
    "asset_emit": ("asset-emit",),
    "providers": ("aip-97",),
    "demo": ("asset-emit", "aip-97", "aip-122"),
    "ui": ("aip-97", "aip-122"),
    "operations": ("asset-emit", "aip-97", "aip-122"),
    "retry_rules": ("aip-97", "aip-122", "retry-rules"),
}


#: Every marker of the suite, registered here only (pytest.ini runs with --strict-markers).
MARKERS = {
    "e2e": "end-to-end test with real Airflow processes (slow)",
    "postgres": "needs the PostgreSQL server from .ci/services.sh (missing, it is a failure)",
    "db": "needs the migrated Airflow metadata database",
    "requires_feature(*names)": "skip unless this release line's series carries the features",
    "image": "the patched image and its stand-in base, built and run in containers (tests/image)",
    "line_independent": (
        "tests pstool's own mechanics, the same code on every line: runs in one line's session only, "
        "PATCHSET_LINE_INDEPENDENT_ON's (default: the default line's)"
    ),
    # Upstream's, for the series' own unit tests run by tests/upstream_unit (its tests_common mirror).
    "db_test": "the test needs the metadata database",
    "need_serialized_dag": "dag_maker returns the serialized Dag",
    "want_activate_assets": "accepted for compatibility; no effect here",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")
    line_independent_on()  # an unknown line is a usage error before anything is collected


def line_independent_on() -> tuple[str, tuple[str, ...]]:
    """Where the tests marked ``line_independent`` run: ``PATCHSET_LINE_INDEPENDENT_ON``.

    ``<line>`` runs them all in that line's session; ``<line>:<path>,<path>`` only those under the
    given paths (relative to ``tests/``, e.g. ``ui,tooling/test_port.py``), the others staying in the
    default line's session. Unset, they all run in the default line's session (a developer's plain
    ``make test``). CI moves part of them to the 3.4 line, whose chain is the shorter one. Each such
    test states the line whose files it uses, so it passes in any line's session.

    :return: the line and the paths it takes (empty: all of them).
    """
    import lines
    from pstool.paths import known_lines  # importable once lines has put dev/ on sys.path

    value = os.environ.get("PATCHSET_LINE_INDEPENDENT_ON") or lines.DEFAULT_LINE
    chosen, _, selection = value.partition(":")
    known = known_lines()
    if chosen not in known:
        raise pytest.UsageError(
            f"PATCHSET_LINE_INDEPENDENT_ON={value!r}: {chosen!r} is not a release line; "
            f"this repository carries: {', '.join(known)}"
        )
    paths = tuple(part.strip().strip("/") for part in selection.split(",") if part.strip())
    missing = [part for part in paths if not (REPO / "tests" / part).exists()]
    if missing:
        raise pytest.UsageError(
            f"PATCHSET_LINE_INDEPENDENT_ON={value!r}: no such path under tests/: {', '.join(missing)}"
        )
    return chosen, paths


def line_independent_line(item: pytest.Item, on: str, paths: tuple[str, ...]) -> str:
    """The line whose session runs ``item``, a test marked ``line_independent``."""
    import lines

    if not paths:
        return on
    relative = Path(item.path).resolve().relative_to(REPO / "tests").as_posix()
    taken = any(relative == part or relative.startswith(part + "/") for part in paths)
    return on if taken else lines.DEFAULT_LINE


_NOT_COLLECTED: dict[str, str] = {}


def _directory_of(path: Path) -> str | None:
    try:
        return Path(path).resolve().relative_to(REPO / "tests").parts[0]
    except (ValueError, IndexError):
        return None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Don't import a directory whose features this line lacks: its modules import their code."""
    import lines

    directory = _directory_of(collection_path)
    if directory not in DIRECTORY_FEATURES:
        return None
    reason = lines.missing(DIRECTORY_FEATURES[directory])
    if reason is None:
        return None
    _NOT_COLLECTED[directory] = reason
    return True


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    asked = {_directory_of(Path(config.invocation_params.dir) / a.split("::")[0]) for a in config.args}
    for directory, reason in sorted(_NOT_COLLECTED.items()):
        if directory in asked or None in asked:  # None: the whole of tests/ (or the repository)
            terminalreporter.write_line(f"tests/{directory}: not run on this line: {reason}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import lines

    on, paths = line_independent_on()
    why = (
        f"PATCHSET_LINE_INDEPENDENT_ON={os.environ['PATCHSET_LINE_INDEPENDENT_ON']}"
        if os.environ.get("PATCHSET_LINE_INDEPENDENT_ON")
        else "the default line; PATCHSET_LINE_INDEPENDENT_ON=<line>[:<paths>] moves them"
    )
    for item in items:
        directory = _directory_of(item.path)
        if directory is None:
            continue  # a file outside tests/ (the in-patch unit tests of the tree)
        if item.get_closest_marker("line_independent"):
            runs_on = line_independent_line(item, on, paths)
            if lines.LINE != runs_on:
                reason = f"line-independent: runs in the {runs_on} line's session only ({why})"
                item.add_marker(pytest.mark.skip(reason=reason))
                continue
        needed = list(DIRECTORY_FEATURES.get(directory, ()))
        for marker in item.iter_markers("requires_feature"):
            needed.extend(marker.args)
        reason = lines.missing(needed) if needed else None
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
