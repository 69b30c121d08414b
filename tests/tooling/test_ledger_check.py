"""The guarantees-ledger check (``pstool.ledger``): each way a ledger can be wrong makes it fail.

The documents and tests are written under a throwaway root (``PATCHSET_DOCS_ROOT`` for verify):
a good ledger passes; a test that does not exist (project suite, in-patch, a benchmark), a row
short of a column, an id given twice, an AIP doc without a ledger or without its hostile read's
date each fail, naming the doc, the line and the row.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.line_independent  # pstool itself

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

from pstool import PatchsetError
from pstool.ledger import check_ledgers, parse_ledger

HEAD = """\
# Feature

Text.

## Guarantees ledger

Last hostile read: 2026-12-07 (the patches, against the shapes).

| id | guarantee | holds in | tests | not covered |
|---|---|---|---|---|
"""

GOOD_ROWS = [
    "| F-1 | A function test. | local | `tests/feat/test_a.py::test_one` | - |",
    "| F-2 | A method, inherited, with a parametrize id. | local, celery | `tests/feat/test_a.py::TestChild::test_base[case-1]`<br>`tests/feat/test_a.py::TestChild::test_own` | k8s: no cluster |",
    "| F-3 | An in-patch test and a benchmark. | local | `airflow-core/tests/unit/test_x.py::test_in_patch`<br>`benchmarks/bench.py` | - |",
    "| F-4 | A test on the other line only. | local | `airflow-core/tests/unit/test_x.py::test_only_there` (9.9) | - |",
    "| F-5 | Code with a pipe: `a \\| b` and `x | y`. | local | `tests/feat/test_a.py::test_one` | - |",
]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "AIP-docs").mkdir()
    (tmp_path / "tests" / "feat").mkdir(parents=True)
    (tmp_path / "tests" / "feat" / "test_a.py").write_text(
        textwrap.dedent(
            """\
            def test_one():
                pass


            class TestBase:
                def test_base(self):
                    pass


            class TestChild(TestBase):
                def test_own(self):
                    pass
            """
        )
    )
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bench.py").write_text("print(1)\n")
    tree = tmp_path / "tree" / "airflow-core" / "tests" / "unit"
    tree.mkdir(parents=True)
    (tree / "test_x.py").write_text("def test_in_patch():\n    pass\n")
    return tmp_path


def _doc(root: Path, rows: list[str], name: str = "feature.md", head: str = HEAD) -> Path:
    path = root / "AIP-docs" / name
    path.write_text(head + "\n".join(rows) + "\n")
    return path


def _fails(root: Path, expected: str) -> None:
    with pytest.raises(PatchsetError) as err:
        check_ledgers(root, root / "tree", "3.3")
    assert expected in str(err.value), str(err.value)


def test_a_good_ledger_passes(root: Path) -> None:
    _doc(root, GOOD_ROWS)
    assert check_ledgers(root, root / "tree", "3.3") == (5, 6)
    ledger = parse_ledger((root / "AIP-docs" / "feature.md").read_text(), "AIP-docs/feature.md")
    assert ledger.hostile_read == "2026-12-07"
    assert ledger.rows[4].cells[1] == "Code with a pipe: `a \\| b` and `x | y`."


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("| F-9 | Gone. | local | `tests/feat/test_a.py::test_gone` | - |", "F-9: tests/feat/test_a.py has no test test_gone"),
        ("| F-9 | Gone. | local | `tests/feat/test_b.py::test_one` | - |", "F-9: tests/feat/test_b.py does not exist"),
        ("| F-9 | Gone. | local | `tests/feat/test_a.py::TestChild::test_gone` | - |", "tests/feat/test_a.py::TestChild has no test test_gone"),
        ("| F-9 | Gone. | local | `tests/feat/test_a.py::TestNone::test_one` | - |", "tests/feat/test_a.py has no class TestNone"),
        (
            "| F-9 | Gone. | local | `airflow-core/tests/unit/test_x.py::test_gone` | - |",
            "airflow-core/tests/unit/test_x.py has no test test_gone in the 3.3 line's tree after the full series",
        ),
        (
            "| F-9 | Gone. | local | `airflow-core/tests/unit/test_x.py::test_gone` (3.3) | - |",
            "airflow-core/tests/unit/test_x.py has no test test_gone",
        ),
        ("| F-9 | Gone. | local | `benchmarks/gone.py` | - |", "F-9: benchmarks/gone.py does not exist"),
        ("| F-9 | Gone. | local | `test_one` | - |", "'test_one' is no test id"),
        ("| F-9 | Short. | local | `tests/feat/test_a.py::test_one` |", "F-9 has 4 columns, not 5"),
        ("| F-9 | Empty. | | `tests/feat/test_a.py::test_one` | - |", "F-9 leaves holds in empty"),
        ("| F-9 | No test. | local | - | - |", "F-9 names no test"),
        ("| F-1 | Again. | local | `tests/feat/test_a.py::test_one` | - |", "the id F-1 is given again (first at AIP-docs/feature.md:"),
        ("| f1 | Bad id. | local | `tests/feat/test_a.py::test_one` | - |", "'f1' is not an id"),
    ],
)
def test_each_broken_row_fails_naming_it(root: Path, row: str, expected: str) -> None:
    _doc(root, [*GOOD_ROWS, row])
    _fails(root, expected)
    _fails(root, "AIP-docs/feature.md:16:")


def test_a_withdrawn_guarantee_keeps_its_id_without_a_test(root: Path) -> None:
    _doc(root, [*GOOD_ROWS, "| F-6 | Withdrawn: the guard never released by itself. | - | - | - |"])
    assert check_ledgers(root, root / "tree", "3.3")[0] == 6


def test_an_id_repeated_in_another_doc_fails(root: Path) -> None:
    _doc(root, GOOD_ROWS)
    _doc(root, ["| F-2 | Elsewhere. | local | `tests/feat/test_a.py::test_one` | - |"], name="other.md")
    _fails(root, "AIP-docs/other.md:11: the id F-2 is given again (first at AIP-docs/feature.md:12)")


def test_an_aip_doc_without_a_ledger_or_its_date_fails(root: Path) -> None:
    _doc(root, GOOD_ROWS)
    (root / "AIP-docs" / "bare.md").write_text("# Bare\n\nNo ledger here.\n")
    _fails(root, "AIP-docs/bare.md: no '## Guarantees ledger' section")
    (root / "AIP-docs" / "bare.md").unlink()
    _doc(root, GOOD_ROWS[:1], name="undated.md", head=HEAD.replace("Last hostile read: 2026-12-07", "Last read: soon"))
    _fails(root, "AIP-docs/undated.md: the ledger has no 'Last hostile read: YYYY-MM-DD' line")


def test_a_wrong_header_fails(root: Path) -> None:
    _doc(root, GOOD_ROWS[:1], head=HEAD.replace("| id | guarantee | holds in | tests | not covered |", "| id | claim | tests |"))
    _fails(root, "the ledger's header is | id | guarantee | holds in | tests | not covered |")


def test_the_repositorys_ledgers_name_tests_that_exist() -> None:
    """The ledgers as they are (project tests, benchmarks; the in-patch ids need the tree: verify)."""
    rows, looked_up = check_ledgers(REPO, None, "3.3")
    assert rows > 0 and looked_up > 0


def test_verify_fails_on_an_in_patch_test_the_series_does_not_carry(seeded: Any) -> None:
    (seeded.root / "AIP-docs").mkdir()
    row = "| A-1 | A marker. | local | `shared/state/tests/state/test_gone.py::test_marker` | - |"
    (seeded.root / "AIP-docs" / "alpha.md").write_text(HEAD + row + "\n")
    proc = seeded.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1
    assert "AIP-docs/alpha.md:11: A-1: shared/state/tests/state/test_gone.py does not exist" in proc.stderr
