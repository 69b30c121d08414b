"""The release line this test session runs on, and the features that line's series carries.

``PATCHSET_LINE`` (``make test LINE=3.4``) selects the line, as for pstool; the venv running pytest
is that line's (``.venv`` or ``.venv-X``). A test written for a feature runs on every line whose
series carries the feature complete; elsewhere it is skipped with the reason. A line's
``line.toml`` may list features whose port is still in progress (``[porting] features``): their
patches are in the series (and verified, with their in-patch unit tests), but their end-to-end tests
are skipped until the port is complete.
"""

from __future__ import annotations

import functools
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "dev") not in sys.path:
    sys.path.insert(0, str(REPO / "dev"))

from pstool import paths  # noqa: E402  (the line is pstool's: one definition of where lines live)

LINE: str = paths.LINE
DEFAULT_LINE: str = paths.DEFAULT_LINE
TREE: Path = paths.tree_dir()


@functools.cache
def series_features() -> frozenset[str]:
    """Every feature the line's series has patches of (integration patches excluded)."""
    from pstool.series import load_series

    return frozenset(p.feature for p in load_series() if p.feature != "integration")


@functools.cache
def porting_features() -> frozenset[str]:
    """Features listed in the line's ``line.toml`` as still being ported."""
    path = paths.LINE_DIR / "line.toml"
    if paths.LINE == paths.DEFAULT_LINE or not path.is_file():
        return frozenset()
    return frozenset(tomllib.loads(path.read_text()).get("porting", {}).get("features", []))


def missing(features: tuple[str, ...] | list[str]) -> str | None:
    """Why these features cannot be tested on this line, or None when all of them can."""
    absent = [f for f in features if f not in series_features()]
    if absent:
        return f"the {LINE} line's series has no {', '.join(absent)} patches"
    porting = [f for f in features if f in porting_features()]
    if porting:
        return f"{', '.join(porting)} is still being ported to the {LINE} line (lines/{LINE}/line.toml)"
    return None
