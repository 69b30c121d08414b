"""pstool: maintain airflow-patchset, a patch series against pinned Apache Airflow releases.

The repository holds only patches, tooling, tests and docs. Upstream comes from the package index
as pinned wheels (``upstream.lock``); this package materializes them as a git tree in the upstream
monorepo layout, applies the series strictly, re-exports it byte-stably, builds patched wheels and
exports upstream-ready series.
"""

from __future__ import annotations

__all__ = ["PatchsetError"]


class PatchsetError(Exception):
    """A problem the user must fix: printed without a traceback, exit status 1."""
