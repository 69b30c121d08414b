"""The release line this test session runs on, and the features that line's series carries.

``PATCHSET_LINE`` (``make test LINE=3.4``) selects the line, as for pstool; the venv running pytest
is that line's (``.venv`` or ``.venv-X``). A test written for a feature runs on every line whose
series carries the feature whole; elsewhere it is left out with the reason (``pstool.lines``: a
line's ``line.toml`` may list features still being ported).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "dev") not in sys.path:
    sys.path.insert(0, str(REPO / "dev"))

from pstool import paths  # noqa: E402  (the line is pstool's: one definition of where lines live)
from pstool.lines import missing, porting_features, series_features  # noqa: E402

LINE: str = paths.LINE
DEFAULT_LINE: str = paths.DEFAULT_LINE
TREE: Path = paths.tree_dir().resolve()
BUILD_DIR: Path = paths.BUILD_DIR

__all__ = [
    "BUILD_DIR",
    "DEFAULT_LINE",
    "LINE",
    "LIVE_TRIES",
    "LIVE_TRY",
    "PAST_TRIES",
    "TREE",
    "missing",
    "porting_features",
    "series_features",
]

#: Where a task instance's tries are, for tests that read them with SQL. 3.3 keeps the live try in
#: ``task_instance`` and the past ones in ``task_instance_history``; 3.4 keeps every try in
#: ``task_instance``, the live one ``working_set IS TRUE`` and the archived ones ``working_set IS
#: NULL``, and names the map index ``region_index``.
#:
#: ``LIVE_TRY``: a condition that keeps only live tries of ``task_instance`` rows.
LIVE_TRY: str = "TRUE" if LINE == DEFAULT_LINE else "working_set IS TRUE"
#: ``LIVE_TRIES`` and ``PAST_TRIES``: FROM-clause sources of the live and the past tries. Each keeps its
#: 3.3 table name as alias and reads 3.4's ``region_index`` as ``map_index`` too, so
#: ``SELECT try_number, map_index, failure_cause FROM {PAST_TRIES} WHERE dag_id = ...`` reads the same
#: columns on both lines.
LIVE_TRIES: str = (
    "task_instance"
    if LINE == DEFAULT_LINE
    else "(SELECT *, region_index AS map_index FROM task_instance WHERE working_set IS TRUE) AS task_instance"
)
PAST_TRIES: str = (
    "task_instance_history"
    if LINE == DEFAULT_LINE
    else "(SELECT *, region_index AS map_index FROM task_instance WHERE working_set IS NULL) AS task_instance_history"
)
