"""The shim itself: every test file the series adds under upstream's test paths is collected here."""

from __future__ import annotations

from pathlib import Path

import pytest
from tree_tests import TREE, tree_test_files


def test_every_tree_test_file_is_collected(request: pytest.FixtureRequest) -> None:
    files = tree_test_files()
    if not (TREE / ".git").exists():
        pytest.fail(f"{TREE} is not materialized; run `make install` first")
    assert files, "the series adds no unit tests under */tests/**"
    collected = {Path(item.path).resolve() for item in request.session.items}
    missing = [str(f.relative_to(TREE)) for f in files if f.resolve() not in collected]
    assert not missing, f"tree test files not collected (no tests in them, or not picked up): {missing}"


def test_shared_library_alias_is_the_vendored_module() -> None:
    import airflow._shared.state as vendored
    import airflow_shared.state as upstream_name

    assert upstream_name is vendored
