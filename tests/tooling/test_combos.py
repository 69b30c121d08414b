"""Each feature alone, with only its dependency closure, runs and migrates a real database of its line.

``pstool verify`` proves that every selection applies and passes the review checks; this test
runs what it cannot: the selection's code, on the session's release line (3.3.2 or 3.4.0b2). For asset-emit
alone, aip-97 alone and aip-122 (with aip-97), the line's selection is applied to a scratch pristine
tree of that line, and the line's *unpatched* venv runs that tree's ``airflow-core/src`` and
``task-sdk/src`` ahead of its own (``PYTHONPATH``): a database made by the unpatched release is
upgraded to the selection's single head, which must be the ``"3.4.0"`` entry of that tree's
``_REVISION_HEADS_MAP`` and add the feature's tables and columns, then downgraded back to the
release's head, and the unpatched release accepts it again. The full series is covered by each
feature's own migration tests (tests/asset_emit, tests/aip97_core, tests/aip122) against the
installed patched wheels.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))
sys.path.insert(0, str(REPO / "tests"))

import harness  # noqa: E402
import lines  # noqa: E402
from pstool.tree import scratch_tree  # noqa: E402

#: Each line's unpatched migration head: 3.3.2's 0123, 3.4.0b2's own head after its 0124-0147.
BASE_HEAD = {"3.3": "d2f4e1b3c5a7", "3.4": "9cffe90fa0c0"}

#: Applies one feature's dependency closure of a line's series to a scratch pristine tree of that
#: line, in a process whose PATCHSET_LINE is that line (pstool reads the line once per process).
#: Prints the tree and the selection's features as JSON.
_SELECT = """
import json, sys
from pathlib import Path
from pstool.series import dependency_closure, load_series, select_patches
from pstool.tree import apply_series, scratch_tree
patches = load_series()
closure = dependency_closure(sys.argv[1], patches)
tree = scratch_tree(Path(sys.argv[2]))
apply_series(tree, select_patches(patches, closure), allow_offset=True)
print(json.dumps({"tree": str(tree), "closure": sorted(closure)}))
"""


def _select(line: str, feature: str, parent: Path) -> tuple[Path, set[str]]:
    env = {**os.environ, "PATCHSET_LINE": line, "PYTHONPATH": str(REPO / "dev")}
    proc = subprocess.run(
        [sys.executable, "-c", _SELECT, feature, str(parent)], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"{line} {feature}: selecting the closure failed:\n{proc.stderr[-3000:]}"
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return Path(found["tree"]), set(found["closure"])
# What each feature's migration adds; a selection must have exactly its features' additions.
ADDS = {
    "asset-emit": ("asset_event_idempotency_key", None),
    "aip-97": ("task_instance", "failure_cause"),
    "aip-122": ("task_instance", "infra_retry_count"),
}


def _heads_map_head(tree: Path) -> str:
    source = (tree / "airflow-core/src/airflow/utils/db.py").read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_REVISION_HEADS_MAP":
            return ast.literal_eval(node.value)["3.4.0"]
    raise AssertionError("no _REVISION_HEADS_MAP in db.py")


def _schema(url: str) -> tuple[str, set[str], set[str]]:
    engine = sa.create_engine(url)
    try:
        insp = sa.inspect(engine)
        with engine.connect() as conn:
            rev = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
        return rev, set(insp.get_table_names()), {c["name"] for c in insp.get_columns("task_instance")}
    finally:
        engine.dispose()


def _present(features: set[str], tables: set[str], ti_columns: set[str]) -> set[str]:
    found = set()
    for feature, (table, column) in ADDS.items():
        if (column is None and table in tables) or (column is not None and column in ti_columns):
            found.add(feature)
    return found & set(ADDS)


@pytest.mark.e2e
@pytest.mark.timeout(600)
@pytest.mark.parametrize("line", [lines.LINE])  # each line's session proves its own line
@pytest.mark.parametrize("feature", ["asset-emit", "aip-97", "aip-122"])
def test_feature_alone_migrates_a_real_database_up_and_down(line: str, feature: str, tmp_path: Path) -> None:
    tree, closure = _select(line, feature, tmp_path)
    try:
        head = _heads_map_head(tree)
        unpatched = harness.unpatched_venv(line=line)
        home = tmp_path / "home"
        # What the unpatched release's `airflow db migrate` makes (its template, made once per venv).
        url = harness.migrated_sqlite(unpatched, tmp_path)
        old = harness.AirflowEnv(unpatched, home, db_url=url)
        assert _schema(url)[0] == BASE_HEAD[line]
        overlay = f"{tree / 'airflow-core/src'}:{tree / 'task-sdk/src'}"
        new = harness.AirflowEnv(unpatched, home, db_url=url, extra_env={"PYTHONPATH": overlay})
        where = new.run_python("import airflow.utils.db as d; print(d.__file__)").stdout.strip()
        assert where.startswith(str(tree)), f"the selection's source is not the one imported: {where}"
        new.airflow("db", "migrate")
        rev, tables, ti_columns = _schema(url)
        assert rev == head, f"{line} {feature}: migrated to {rev}, but _REVISION_HEADS_MAP['3.4.0'] is {head}"
        assert _present(closure, tables, ti_columns) == closure & set(ADDS)
        new.airflow("db", "downgrade", "--to-revision", BASE_HEAD[line], "-y")
        rev, tables, ti_columns = _schema(url)
        assert rev == BASE_HEAD[line] and not _present(closure, tables, ti_columns)
        old.airflow("db", "check-migrations", "-t", "5")
    finally:
        shutil.rmtree(tree, ignore_errors=True)


@pytest.mark.e2e
@pytest.mark.line_independent
@pytest.mark.timeout(600)
def test_a_hand_edited_generated_file_in_a_selection_is_caught(tmp_path: Path) -> None:
    """The per-selection generator check fails on a generated file its source does not produce.

    On the session's line throughout (whichever runs line-independent tests): pstool in this process
    reads that line's pins, tree and venv, so the pristine tree and the generators are the same line's.
    """
    import re

    from pstool import PatchsetError
    from pstool.generated import SDK_MODELS, check_generated_from_source
    from pstool.git import git

    tree = scratch_tree(tmp_path)
    try:
        path = tree / SDK_MODELS
        text = path.read_text()
        released = re.search(r'^API_VERSION: Final\[str\] = "(\d{4}-\d{2}-\d{2})"$', text, re.MULTILINE)
        assert released, f"no API_VERSION in the {lines.LINE} line's pristine {SDK_MODELS}"
        # Bumped by hand, no bundle entry (3.3.2 has 2026-06-30, 3.4.0b2 2026-10-30).
        path.write_text(text.replace(released[0], released[0].replace(released[1], "2099-12-31"), 1))
        git(tree, "commit", "-q", "-am", "Bump API_VERSION by hand")
        with pytest.raises(PatchsetError, match="_generated.py"):
            check_generated_from_source(tree, "hand-edited")
    finally:
        shutil.rmtree(tree, ignore_errors=True)
