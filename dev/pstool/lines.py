"""Which features a release line's series carries, and which of them are still being ported.

A feature is *carried* by a line when the line's series has patches of it. A line's ``line.toml``
may list features whose port is not complete yet (``[porting] features``): their patches are in
the series (verified, with their in-patch unit tests), but what needs the whole feature (the
end-to-end tests, the demo) leaves them out on that line until the port is complete.
``PATCHSET_RUN_PORTING=1`` runs them anyway, for whoever is porting them.
"""

from __future__ import annotations

import functools
import os
import tomllib

from pstool import paths


@functools.cache
def series_features() -> frozenset[str]:
    """Every feature the line's series has patches of (integration patches excluded)."""
    from pstool.series import load_series

    return frozenset(p.feature for p in load_series() if not p.is_integration)


@functools.cache
def porting_features() -> frozenset[str]:
    """Features the line's ``line.toml`` lists as still being ported."""
    path = paths.CURRENT.line_toml
    if not path.is_file():
        return frozenset()
    return frozenset(tomllib.loads(path.read_text()).get("porting", {}).get("features", []))


@functools.cache
def generator_options() -> dict:
    """The line's ``[generators]`` settings from ``line.toml`` (how upstream's generators ran for it)."""
    path = paths.CURRENT.line_toml
    if not path.is_file():
        return {}
    return dict(tomllib.loads(path.read_text()).get("generators", {}))


def missing(features: tuple[str, ...] | list[str]) -> str | None:
    """Why these features cannot be exercised whole on this line, or None when they can."""
    absent = [f for f in features if f not in series_features()]
    if absent:
        return f"the {paths.LINE} line's series has no {', '.join(absent)} patches"
    porting = [f for f in features if f in porting_features()]
    if porting and not os.environ.get("PATCHSET_RUN_PORTING"):
        return f"{', '.join(porting)} is still being ported to the {paths.LINE} line (lines/{paths.LINE}/line.toml)"
    return None
