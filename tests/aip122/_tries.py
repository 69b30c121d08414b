"""Where the AIP-122 tests read a task instance's tries with SQL, on either release line."""

from __future__ import annotations

import lines
from lines import DEFAULT_LINE, LINE

__all__ = ["LIVE_TRIES", "PAST_TRIES", "pending_try"]

#: The FROM-clause source of each task instance's live row (its current try). 3.3 keeps only the
#: live row in ``task_instance``; 3.4 keeps every try there and marks the live one
#: ``working_set IS TRUE``. Aliased ``task_instance``, as ``lines.PAST_TRIES`` keeps its 3.3 name;
#: 3.4's ``region_index`` (3.3's ``map_index``, renamed) is also read as ``map_index``.
LIVE_TRIES: str = (
    "task_instance"
    if LINE == DEFAULT_LINE
    else "(SELECT *, region_index AS map_index FROM task_instance WHERE working_set IS TRUE) AS task_instance"
)

#: ``lines.PAST_TRIES`` (the past tries), with 3.4's ``region_index`` also read as ``map_index``.
PAST_TRIES: str = (
    lines.PAST_TRIES
    if LINE == DEFAULT_LINE
    else f"(SELECT *, region_index AS map_index FROM {lines.PAST_TRIES}) AS task_instance_history"
)


def pending_try(failed_try: int) -> int:
    """The try_number of the live row of a task instance up for retry after ``failed_try`` failed."""
    # 3.4 allocates the next try number when the failed try is archived: its up_for_retry row is the
    # next try's own row. 3.3 keeps the failed try's number until the scheduler starts the next try.
    return failed_try if LINE == DEFAULT_LINE else failed_try + 1
