# Licensed to the Apache Software Foundation (ASF) under one
# or more contributor license agreements.  See the NOTICE file
# distributed with this work for additional information
# regarding copyright ownership.  The ASF licenses this file
# to you under the Apache License, Version 2.0 (the
# "License"); you may not use this file except in compliance
# with the License.  You may obtain a copy of the License at
#
#   http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an
# "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
# KIND, either express or implied.  See the License for the
# specific language governing permissions and limitations
# under the License.
"""The guarantees ledgers (``pstool verify``; the format is ``docs/development/ledger.md``).

Every AIP doc (``AIP-docs/*.md``) ends with a section ``## Guarantees ledger``: a line
``Last hostile read: YYYY-MM-DD ...`` and a table ``| id | guarantee | holds in | tests | not covered |``.
:func:`check_ledgers` fails when an AIP doc has no such section or no date, when a row lacks a
column or has one too many, when an id is malformed or repeats (across every doc), and when a test a
row names does not exist:

- ``tests/<path>.py::<name>`` (or ``::<Class>::<name>``): the project's suite, read with ``ast``
  (nothing is imported or collected: a test function or method of that name, a class's inherited
  methods included, at the module's top level);
- ``airflow-core/...``, ``task-sdk/...``, ``providers/...``, ``shared/...`` ``::<name>``: an in-patch
  test, looked up the same way in the tree the full series builds (verify's strict-apply tree, or
  ``build/<line>/tree`` for ``pstool ledger``);
- ``benchmarks/<file>.py``: the file exists;
- a parametrize suffix (``[case]``) is not checked; ``(3.3)`` or ``(3.4)`` after the backticks
  restricts the look-up to that line's verify.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from pstool import PatchsetError

SECTION = "## Guarantees ledger"
HEADER = ["id", "guarantee", "holds in", "tests", "not covered"]
HOSTILE_RE = re.compile(r"^Last hostile read:\s*(\d{4}-\d{2}-\d{2})\b", re.MULTILINE)
ID_RE = re.compile(r"^[A-Z][A-Z0-9]*-\d+$")
_TEST_RE = re.compile(r"`([^`]+)`\s*(?:\((\d+\.\d+)\))?")
IN_PATCH_ROOTS = ("airflow-core/", "task-sdk/", "providers/", "shared/")


@dataclass
class Row:
    doc: str
    line: int
    cells: list[str]
    tests: list[tuple[str, str | None]] = field(default_factory=list)  # (node id, line or None)

    @property
    def id(self) -> str:
        return self.cells[0] if self.cells else ""


@dataclass
class Ledger:
    doc: str
    hostile_read: str | None
    rows: list[Row]


def _cells(line: str) -> list[str]:
    body = line.strip()
    body = body.removeprefix("|")
    body = body.removesuffix("|")
    # A "|" inside backticks (a node id never has one; code in a guarantee may) does not split.
    cells, current, in_code = [], [], False
    for char in body:
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    cells.append("".join(current).strip())
    return cells


def parse_ledger(text: str, doc: str) -> Ledger:
    """The ledger section of one AIP doc; :class:`PatchsetError` when it has none."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == SECTION)
    except StopIteration:
        raise PatchsetError(f"{doc}: no '{SECTION}' section (docs/development/ledger.md)") from None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    section = "\n".join(lines[start:end])
    hostile = HOSTILE_RE.search(section)
    rows: list[Row] = []
    header_seen = False
    for number in range(start + 1, end):
        line = lines[number]
        if not line.lstrip().startswith("|"):
            continue
        cells = _cells(line)
        if not header_seen:
            if [c.lower() for c in cells] != HEADER:
                raise PatchsetError(
                    f"{doc}:{number + 1}: the ledger's header is | {' | '.join(HEADER)} |, not | {' | '.join(cells)} |"
                )
            header_seen = True
            continue
        if all(re.fullmatch(r":?-{3,}:?", c) for c in cells):
            continue
        row = Row(doc, number + 1, cells)
        for node, line_only in _TEST_RE.findall(cells[3] if len(cells) > 3 else ""):
            row.tests.append((node.strip(), line_only or None))
        rows.append(row)
    if not header_seen:
        raise PatchsetError(f"{doc}: the '{SECTION}' section has no table")
    return Ledger(doc, hostile.group(1) if hostile else None, rows)


def _defined_tests(path: Path) -> dict[str, set[str]]:
    """{"": module-level functions, "<Class>": its methods (inherited from classes of the module too)}."""
    tree = ast.parse(path.read_text(), str(path))
    found: dict[str, set[str]] = {"": set()}
    classes: dict[str, ast.ClassDef] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[""].add(node.name)
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = node
        elif isinstance(node, ast.Assign):  # test_x = some_factory(...)
            found[""].update(t.id for t in node.targets if isinstance(t, ast.Name))

    def methods(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        node = classes.get(name)
        if node is None or name in seen:
            return set()
        own = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        own |= {t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        for base in node.bases:
            if isinstance(base, ast.Name):
                own |= methods(base.id, seen | {name})
        return own

    for name in classes:
        found[name] = methods(name)
    return found


def test_exists(root: Path, node: str, cache: dict[Path, dict[str, set[str]]]) -> str | None:
    """None if ``node`` (``path.py::[Class::]name[params]``, or a bare path) is a test under ``root``; else why not."""
    path_part, _, rest = node.partition("::")
    path = root / path_part
    if not path.is_file():
        return f"{path_part} does not exist"
    if not rest:
        return None
    parts = rest.split("::")
    parts[-1] = parts[-1].split("[", 1)[0]
    if path not in cache:
        try:
            cache[path] = _defined_tests(path)
        except SyntaxError as err:
            return f"{path_part} does not parse: {err}"
    defined = cache[path]
    if len(parts) == 1:
        return None if parts[0] in defined[""] else f"{path_part} has no test {parts[0]}"
    if len(parts) == 2:
        cls, name = parts
        if cls not in defined:
            return f"{path_part} has no class {cls}"
        return None if name in defined[cls] else f"{path_part}::{cls} has no test {name}"
    return f"{node}: a node id is path.py::name or path.py::Class::name"


def load_ledgers(docs_root: Path) -> list[Ledger]:
    """Every AIP doc's ledger; :class:`PatchsetError` naming every doc without one or without its date."""
    docs = sorted((docs_root / "AIP-docs").glob("*.md"))
    ledgers, problems = [], []
    for doc in docs:
        name = doc.relative_to(docs_root).as_posix()
        try:
            ledger = parse_ledger(doc.read_text(), name)
        except PatchsetError as err:
            problems.append(str(err))
            continue
        if ledger.hostile_read is None:
            problems.append(f"{name}: the ledger has no 'Last hostile read: YYYY-MM-DD' line")
        ledgers.append(ledger)
    if problems:
        raise PatchsetError("\n".join(problems))
    return ledgers


def check_ledgers(docs_root: Path, tree: Path | None, line: str) -> tuple[int, int]:
    """Check every ledger (see the module docstring); return (rows, tests looked up)."""
    ledgers = load_ledgers(docs_root)
    problems: list[str] = []
    seen: dict[str, str] = {}
    cache: dict[Path, dict[str, set[str]]] = {}
    looked_up = 0
    rows = [row for ledger in ledgers for row in ledger.rows]
    for row in rows:
        where = f"{row.doc}:{row.line}"
        if len(row.cells) != len(HEADER):
            problems.append(f"{where}: {row.id or 'a row'} has {len(row.cells)} columns, not {len(HEADER)} ({' | '.join(HEADER)})")
            continue
        empty = [HEADER[i] for i, cell in enumerate(row.cells) if not cell]
        if empty:
            problems.append(f"{where}: {row.id or 'a row'} leaves {', '.join(empty)} empty ('-' for none)")
        if not ID_RE.match(row.id):
            problems.append(f"{where}: {row.id!r} is not an id (PREFIX-N, e.g. AIP97-3)")
        elif row.id in seen:
            problems.append(f"{where}: the id {row.id} is given again (first at {seen[row.id]})")
        else:
            seen[row.id] = where
        withdrawn = row.cells[1].lower().startswith("withdrawn")
        if not row.tests and not withdrawn:
            problems.append(f"{where}: {row.id} names no test (node ids in backticks; a withdrawn guarantee says 'Withdrawn')")
        for node, only in row.tests:
            if only is not None and only != line:
                continue
            looked_up += 1
            if node.startswith(("tests/", "benchmarks/")):
                if node.startswith("benchmarks/") and ("::" in node or not node.endswith(".py")):
                    problems.append(f"{where}: {row.id}: a benchmark is named by its file, benchmarks/<file>.py ({node})")
                    continue
                why = test_exists(docs_root, node, cache)
            elif node.startswith(IN_PATCH_ROOTS):
                if tree is None:
                    continue
                why = test_exists(tree, node, cache)
                if why:
                    why += f" in the {line} line's tree after the full series"
            else:
                why = (
                    f"{node!r} is no test id (tests/..., benchmarks/<file>.py, or an in-patch "
                    f"{', '.join(r.rstrip('/') for r in IN_PATCH_ROOTS)}/... path)"
                )
            if why:
                problems.append(f"{where}: {row.id}: {why}")
    if problems:
        raise PatchsetError("the guarantees ledgers (docs/development/ledger.md):\n" + "\n".join(f"  {p}" for p in problems))
    return len(rows), looked_up
