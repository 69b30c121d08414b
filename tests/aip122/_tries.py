"""The try number the AIP-122 tests expect after a failure, on either release line.

Where the tries are (``LIVE_TRIES``, ``PAST_TRIES``) is ``tests/lines.py``'s.
"""

from __future__ import annotations

from lines import DEFAULT_LINE, LINE

__all__ = ["pending_try"]


def pending_try(failed_try: int) -> int:
    """The try_number of the live row of a task instance up for retry after ``failed_try`` failed."""
    # 3.4 allocates the next try number when the failed try is archived: its up_for_retry row is the
    # next try's own row. 3.3 keeps the failed try's number until the scheduler starts the next try.
    return failed_try if LINE == DEFAULT_LINE else failed_try + 1
