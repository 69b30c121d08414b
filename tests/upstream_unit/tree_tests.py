"""Which test files of the materialized tree the shim runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

from lines import TREE  # noqa: E402  (build/<line>/tree; PATCHSET_TREE overrides)

BASE_REF = "refs/patches/upstream-base"
TEST_ROOTS = ("airflow-core/tests/", "task-sdk/tests/", "providers/", "shared/")


def tree_test_files(tree: Path = TREE) -> list[Path]:
    """The test files the series adds (or changes) under upstream's test paths, at the tree's HEAD."""
    if not (tree / ".git").exists():
        return []
    names = subprocess.run(
        ["git", "-C", str(tree), "diff", "--name-only", "--diff-filter=AM", f"{BASE_REF}..HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for name in names:
        path = Path(name)
        if (
            name.startswith(TEST_ROOTS)
            and "tests" in path.parts
            and path.name.startswith("test_")
            and path.suffix == ".py"
        ):
            found.append(tree / name)
    return sorted(found)
