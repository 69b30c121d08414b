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
"""Nothing of this project's process in the product (``pstool verify``, "process references").

The product is what users, operators and upstream reviewers read: the patches (their commit
messages and every line they add, which includes the generated REST spec and TypeScript client,
newsfragments, docstrings and the concept pages), the edits a pull request's cover letter carries
(the strings of ``lines/upstream-edits.toml``), and the repository's documents: ``README.md``,
``CONTRIBUTING.md``, ``SECURITY.md``, ``CHANGELOG.md``, ``docs/``, ``AIP-docs/``, ``examples/``,
``monitoring/``, ``docker/`` and the demo (``dev/demo.py``). None of it may name this project's own
issue tracker, its review rounds or who asked for a change. A reference to upstream is written
``apache/airflow#NNNNN`` (or ``apache/airflow#NNNNN``'s bare ``#NNNNN``, four digits or more).

The patterns (case-insensitive; :data:`PATTERNS`):

- ``issue-number``: the word issue or issues followed by a number of one to three digits, with or
  without a hash (a list such as "issues 36/37" is refused at its first number). Upstream's
  issues have four digits or more, so "issue 12345" passes; write ``apache/airflow#12345``.
- ``hash-number``: a number of one to three digits after a hash, in parentheses or brackets, or
  after PR, pull request, fixes, closes, refs or see (after issue it is an ``issue-number``). A
  lone ``#1`` elsewhere (a queue called "gpu pool #1" in a test) passes.
- ``round``: a review round, an ordinal or a number with the word round ("fifth round", "round 3").
- ``asked-by``: "asked by".
- ``the-issue``: "the issue's" and "the issue asks/asked/found": the tracker's issue in prose.

Git trailers (``Feature:``, ``Upstream-Status:``, ``Depends:``) are not prose and are not read.
Context and removed lines of a patch are upstream's text and are not read either.

``dev/verify-pending.toml`` lists the places another change is rewriting at the moment
(``[[process_reference]]``: ``where``, a file or a patch name; ``contains``, text of the offending
line; ``reason``). Such a place is reported as pending instead of failing the check, and an entry that no
longer matches anything fails it: it is removed when the rewrite lands.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pstool import PatchsetError
from pstool.series import REQUIRED_TRAILERS, Patch, split_patch

_ORDINALS = "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|last|previous|next"

#: (name, pattern): what the check refuses. See the module docstring for each one's reason.
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("issue-number", re.compile(r"\bissues?\s+#?\d{1,3}(?!\d)", re.IGNORECASE)),
    (
        "hash-number",
        re.compile(
            r"(?:[(\[]\s*#\d{1,3}(?!\d)|\b(?:prs?|pull\s+requests?|fix(?:es|ed)?|close[sd]?|refs?|see)\s+#\d{1,3}(?!\d))",
            re.IGNORECASE,
        ),
    ),
    ("round", re.compile(rf"\b(?:(?:{_ORDINALS}|\d+(?:st|nd|rd|th))\s+(?:review\s+)?round\b|round\s+\d+\b)", re.IGNORECASE)),
    ("asked-by", re.compile(r"\basked\s+by\b", re.IGNORECASE)),
    ("the-issue", re.compile(r"\bthe\s+issue(?:'s\b|\s+(?:asks|asked|found)\b)", re.IGNORECASE)),
]

#: The repository's product documents: files, and directories read recursively (text files only).
PRODUCT_PATHS = (
    "README.md",
    "CONTRIBUTING.md",
    "SECURITY.md",
    "CHANGELOG.md",
    "docs",
    "AIP-docs",
    "examples",
    "monitoring",
    "docker",
    "dev/demo.py",
)
TEXT_SUFFIXES = {".md", ".py", ".rst", ".txt", ".yml", ".yaml", ".json", ".toml", ".sh", ".cfg", ".ini", ""}
PENDING_FILE = "dev/verify-pending.toml"
_TRAILER_LINE = re.compile(rf"^(?:{'|'.join(REQUIRED_TRAILERS)}|Signed-off-by|Co-authored-by):", re.IGNORECASE)


@dataclass(frozen=True)
class Reference:
    """One place that names this project's process: where (a file or a patch, and a line), which pattern, the line."""

    where: str
    line: int
    pattern: str
    match: str
    text: str

    def __str__(self) -> str:
        return f"{self.where}:{self.line}: {self.match!r} ({self.pattern}): {self.text.strip()[:160]}"


def scan_text(text: str, where: str, *, first_line: int = 1) -> list[Reference]:
    """Every match of :data:`PATTERNS` in ``text``, line by line."""
    found = []
    for number, line in enumerate(text.splitlines(), first_line):
        for name, pattern in PATTERNS:
            for match in pattern.finditer(line):
                found.append(Reference(where, number, name, match.group(0), line))
    return found


def scan_patch(patch: Patch) -> list[Reference]:
    """The commit message (subject and body, not the trailers) and the lines the patch adds."""
    found = scan_text(patch.subject, f"{patch.name} (subject)")
    head, rest = split_patch(patch.body)
    head_text = head.decode("utf-8", "replace")
    top, sep, message = head_text.partition("\n\n")
    offset = top.count("\n") + 3  # the patch file's line of the message's first line
    for number, line in enumerate(message.splitlines() if sep else [], offset):
        if not _TRAILER_LINE.match(line):
            found += scan_text(line, f"{patch.name} (message)", first_line=number)
    current = None
    for number, line in enumerate(rest.decode("utf-8", "replace").splitlines(), head_text.count("\n") + 1):
        if line.startswith("diff --git a/"):
            current = line.split(" b/", 1)[1]
        elif line.startswith("+") and not line.startswith("+++") and current:
            found += scan_text(line[1:], f"{patch.name} (+ {current})", first_line=number)
    return found


def product_files(root: Path) -> list[Path]:
    """The text files of :data:`PRODUCT_PATHS` under ``root`` (the repository, ``PATCHSET_DOCS_ROOT``)."""
    files: list[Path] = []
    for name in PRODUCT_PATHS:
        path = root / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += sorted(
                p for p in path.rglob("*")
                if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts
            )
    return files


def scan_documents(root: Path) -> list[Reference]:
    found: list[Reference] = []
    for path in product_files(root):
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += scan_text(text, path.relative_to(root).as_posix())
    return found


def scan_upstream_edits(path: Path) -> list[Reference]:
    """The strings of ``lines/upstream-edits.toml`` (each goes into a cover letter); its comments are not read."""
    if not path.is_file():
        return []
    data = tomllib.loads(path.read_text())
    found: list[Reference] = []

    def walk(value: object, key: str) -> None:
        if isinstance(value, str):
            found.extend(scan_text(value, f"{path.name} [{key}]", first_line=1))
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else k)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{key}[{i}]")

    walk(data, "")
    return found


@dataclass(frozen=True)
class Pending:
    where: str
    contains: str
    reason: str


def load_pending(root: Path) -> list[Pending]:
    path = root / PENDING_FILE
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise PatchsetError(f"{PENDING_FILE}: {err}") from err
    entries = []
    for number, entry in enumerate(data.get("process_reference", []), 1):
        missing = [k for k in ("where", "contains", "reason") if not entry.get(k)]
        if missing:
            raise PatchsetError(f"{PENDING_FILE}: [[process_reference]] number {number} lacks {', '.join(missing)}")
        entries.append(Pending(entry["where"], entry["contains"], entry["reason"]))
    return entries


def _target(ref: Reference) -> str:
    """The file or patch a reference is in (``oom/0005-....patch``, ``docs/operations.md``)."""
    return ref.where.split(" (", 1)[0].split(" [", 1)[0]


def check_process_references(patches: list[Patch], root: Path, upstream_edits: Path) -> tuple[int, list[Reference]]:
    """Refuse this project's process in the product; return (places read, pending references).

    Raises :class:`PatchsetError` naming every reference (file or patch, line, the text) that no
    pending entry covers, and every pending entry that matches nothing that exists on this line.
    """
    refs: list[Reference] = []
    for patch in patches:
        refs += scan_patch(patch)
    refs += scan_documents(root)
    refs += scan_upstream_edits(upstream_edits)
    pending = load_pending(root)
    used: set[int] = set()
    refused, waiting = [], []
    for ref in refs:
        hit = next(
            (i for i, p in enumerate(pending) if p.where == _target(ref) and p.contains in ref.text), None
        )
        if hit is None:
            refused.append(ref)
        else:
            used.add(hit)
            waiting.append(ref)
    present = {p.name for p in patches} | {f.relative_to(root).as_posix() for f in product_files(root)}
    stale = [p for i, p in enumerate(pending) if i not in used and p.where in present]
    problems = []
    if refused:
        problems.append(
            "these name this project's issues, review rounds or who asked (name the feature, the section or "
            "the upstream issue, apache/airflow#NNNNN, instead):\n" + "\n".join(f"  {r}" for r in refused)
        )
    if stale:
        problems.append(
            f"{PENDING_FILE}: these pending entries match nothing any more (remove them):\n"
            + "\n".join(f"  {p.where}: {p.contains!r}" for p in stale)
        )
    if problems:
        raise PatchsetError("\n".join(problems))
    return len(patches) + len(product_files(root)) + 1, waiting
