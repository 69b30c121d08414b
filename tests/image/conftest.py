"""Fixtures of the container tests: the engine, and this line's stand-in base and patched image.

The images are what ``make base-image`` and ``make image BASE=localhost/airflow-standin:<release>``
build (pstool.image), built once per session or found cached (the stand-in by the key of its inputs,
the patched image by the engine's layer cache). ``dev/run_tests.py`` builds them before the session,
outside any test's timeout; the fixtures then only find them. Every test here is marked ``image``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))
sys.path.insert(0, str(Path(__file__).parent))

from pstool import PatchsetError  # noqa: E402


@pytest.fixture
def unreleased_lines(tmp_path: Path) -> Path:
    """A copy of ``lines/`` without ``releases.toml``: ``pstool image`` there sees its label unreleased.

    For the tests of ``pstool image``'s other refusals and of a build through the command itself: between
    releases, the series differs from the released one and the command refuses the label first
    (docs/development/release.md), which those tests are not about. ``PATCHSET_LINES`` points at it.
    """
    import shutil

    copy = tmp_path / "lines"
    shutil.copytree(REPO / "lines", copy, ignore=shutil.ignore_patterns("releases.toml"))
    return copy


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.image)


@pytest.fixture(scope="session")
def engine():
    from pstool.image import detect_engine

    try:
        return detect_engine()
    except PatchsetError as err:
        pytest.fail(str(err))


@pytest.fixture(scope="session")
def standin(engine) -> str:
    """``localhost/airflow-standin:<release>`` (make base-image)."""
    from pstool.image import base_image

    started = time.monotonic()
    try:
        tag = base_image(engine=engine, quiet=True)
    except PatchsetError as err:
        pytest.fail(str(err))
    print(f"stand-in {tag}: {time.monotonic() - started:.0f}s")
    return tag


@pytest.fixture(scope="session")
def patched(engine, standin) -> str:
    """``airflow-patchset:<release>-<label>`` on the stand-in (make image BASE=<stand-in>), from dist/."""
    from pstool.image import image

    started = time.monotonic()
    try:
        tag = image(base=standin, engine=engine, build_wheels=False, quiet=True)
    except PatchsetError as err:
        pytest.fail(str(err))
    print(f"patched {tag}: {time.monotonic() - started:.0f}s")
    return tag
