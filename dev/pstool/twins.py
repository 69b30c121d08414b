"""Twins: one patch as each release line carries it, and whether the lines have kept together.

A patch's *twin* is the patch of the same name (``<feature>/<NNNN>-<slug>.patch``) in another line's
series. The two differ wherever the releases differ, so their bytes are never compared with each
other. What is compared is each side with itself: ``lines/twins.toml`` records, per patch, a
fingerprint of every line's version at the moment they were last known to be together (written by
``pstool port``, which carries one change to every line, and by ``pstool twins --accept``). A change
made since then on one line only shows as one fingerprint that moved while the other stayed:
``pstool verify`` reports it, with what changed, and fails.

The fingerprint is the commit message (subject and body, without the series' own trailers) and the
added and removed lines of each file, in order. Hunk positions, ``index`` lines and context lines
are left out: they move when an earlier patch of the same line changes, which is not a change of
this patch.

A patch may differ on purpose:

- a change accepted on one line only (``pstool twins --accept PATCH --reason "..."``) is recorded as
  in sync, with the reason kept in ``differs``, shown by every later report;
- a patch one line needs and another does not is declared with ``only`` and a ``reason``
  (``pstool twins --only 3.3 PATCH --reason "..."``).
"""

from __future__ import annotations

import difflib
import hashlib
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from pstool import PatchsetError
from pstool.paths import LINES_DIR, TWINS_FILE, for_line, known_lines
from pstool.series import INTERNAL_TRAILERS, read_series, split_patch

HEADER = """\
# Twins: each patch as every release line carries it, and the state at which the lines were last
# together. Written by `pstool port` (make port) and `pstool twins --accept/--only/--forget`; read by
# `pstool verify`, which fails on a patch changed on one line only since then (pstool/twins.py).
# `fingerprint` per line: the patch's message and its added/removed lines (pstool.twins.fingerprint);
# `blob` per line: the git blob of the patch file then, to show what changed since.
"""


def fingerprint(data: bytes) -> str:
    """What a patch *says*: its message (without internal trailers) and its +/- lines per file."""
    head, rest = split_patch(data)
    subject, message = "", []
    in_subject = False
    header, _, body = head.partition(b"\n\n")
    for raw in header.decode("utf-8", "replace").splitlines():
        if raw.startswith("Subject: "):
            subject, in_subject = raw[len("Subject: ") :], True
        elif in_subject and raw.startswith((" ", "\t")):
            subject += " " + raw.strip()
        else:
            in_subject = False
    for raw in body.decode("utf-8", "replace").splitlines():
        if not any(raw.startswith(f"{key}:") for key in INTERNAL_TRAILERS):
            message.append(raw.rstrip())
    digest = hashlib.sha256()
    digest.update(" ".join(subject.split()).encode() + b"\n" + "\n".join(message).strip().encode() + b"\n")
    for raw in rest.split(b"\n"):
        if raw.startswith(b"diff --git "):
            digest.update(b"F " + raw + b"\n")
        elif raw.startswith((b"+++", b"---")):
            continue
        elif raw.startswith((b"+", b"-")):
            digest.update(raw.rstrip() + b"\n")
    return digest.hexdigest()[:24]


def blob_id(data: bytes) -> str:
    """The patch file's git blob id, written to the repository's object store so that a later report
    can show what changed since, even before the recorded version is committed."""
    proc = subprocess.run(["git", "hash-object", "-w", "--stdin"], input=data, capture_output=True, check=False, cwd=LINES_DIR)
    if proc.returncode:  # lines/ outside a git work tree: the id alone
        proc = subprocess.run(["git", "hash-object", "--stdin"], input=data, capture_output=True, check=True, cwd=LINES_DIR)
    return proc.stdout.decode().strip()


@dataclass
class Entry:
    """What ``twins.toml`` says of one patch name."""

    patch: str
    fingerprints: dict[str, str] = field(default_factory=dict)
    blobs: dict[str, str] = field(default_factory=dict)
    differs: str = ""
    only: list[str] = field(default_factory=list)
    reason: str = ""


def load(path: Path = TWINS_FILE) -> dict[str, Entry]:
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise PatchsetError(f"{path}: {err}") from err
    entries = {}
    for name, raw in data.get("patch", {}).items():
        entries[name] = Entry(
            name,
            dict(raw.get("fingerprint", {})),
            dict(raw.get("blob", {})),
            raw.get("differs", ""),
            list(raw.get("only", [])),
            raw.get("reason", ""),
        )
    return entries


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def save(entries: dict[str, Entry], path: Path = TWINS_FILE) -> None:
    lines = [HEADER]
    for name in sorted(entries):
        entry = entries[name]
        lines.append(f"[patch.{_quote(name)}]")
        if entry.only:
            lines.append(f"only = [{', '.join(_quote(x) for x in entry.only)}]")
            lines.append(f"reason = {_quote(entry.reason)}")
        else:
            pairs = ", ".join(f"{_quote(k)} = {_quote(v)}" for k, v in sorted(entry.fingerprints.items()))
            lines.append(f"fingerprint = {{ {pairs} }}")
            pairs = ", ".join(f"{_quote(k)} = {_quote(v)}" for k, v in sorted(entry.blobs.items()))
            lines.append(f"blob = {{ {pairs} }}")
            if entry.differs:
                lines.append(f"differs = {_quote(entry.differs)}")
        lines.append("")
    path.write_text("\n".join(lines))


def carried(lines: list[str] | None = None) -> dict[str, dict[str, bytes]]:
    """{patch name: {line: the patch file's bytes}} for every patch of every line's series."""
    result: dict[str, dict[str, bytes]] = {}
    for line in lines or known_lines():
        patches_dir = for_line(line).patches_dir
        for name in read_series(patches_dir / "series"):
            result.setdefault(name, {})[line] = (patches_dir / name).read_bytes()
    return result


def _old_version(blob: str) -> bytes | None:
    proc = subprocess.run(["git", "cat-file", "blob", blob], capture_output=True, cwd=LINES_DIR, check=False)
    return proc.stdout if proc.returncode == 0 else None


def _what_changed(name: str, line: str, old_blob: str, new: bytes, limit: int = 40) -> list[str]:
    old = _old_version(old_blob) if old_blob else None
    if old is None:
        return [f"      (the recorded version {old_blob[:12] or '?'} of lines/{line}/patches/{name} is not in this repository)"]
    diff = list(
        difflib.unified_diff(
            old.decode("utf-8", "replace").splitlines(),
            new.decode("utf-8", "replace").splitlines(),
            f"{line} at the last port",
            f"{line} now",
            n=1,
            lineterm="",
        )
    )
    interesting = [d for d in diff if not d.startswith(("-index ", "+index ", "-@@", "+@@"))]
    shown = [f"      {d}" for d in interesting[:limit]]
    if len(interesting) > limit:
        shown.append(f"      ... ({len(interesting) - limit} more diff lines)")
    return shown


@dataclass
class Report:
    lines: list[str]
    problems: list[str]


def check(entries: dict[str, Entry] | None = None, lines: list[str] | None = None) -> Report:
    """Each patch's twins and what changed on one line only since the last port."""
    entries = load() if entries is None else entries
    lines = lines or known_lines()
    found = carried(lines)
    out: list[str] = []
    problems: list[str] = []
    for name in sorted(found):
        versions = found[name]
        entry = entries.get(name)
        present = sorted(versions)
        absent = [x for x in lines if x not in versions]
        if absent:
            if entry and entry.only and sorted(entry.only) == present:
                out.append(f"only {', '.join(present)}: {name} ({entry.reason})")
                continue
            problems.append(
                f"{name} is on {', '.join(present)} but not on {', '.join(absent)}: port it "
                f"(make port), or declare why not (pstool twins --only {present[0]} {name} --reason ...)"
            )
            continue
        if entry is None or entry.only:
            problems.append(f"{name}: no record of its twins being together; after checking them, pstool twins --accept {name}")
            continue
        moved = [x for x in lines if fingerprint(versions[x]) != entry.fingerprints.get(x)]
        if not moved:
            note = f" (differ on purpose: {entry.differs})" if entry.differs else ""
            out.append(f"twins {' '.join(lines)}: {name}, together since the last port{note}")
            continue
        still = [x for x in lines if x not in moved]
        if still:
            problem = [
                f"{name} changed on {', '.join(moved)} only since the last port ({', '.join(still)} did not): "
                f"port the change (make port FROM={moved[0]} COMMIT=...), or accept it on purpose "
                f"(pstool twins --accept {name} --reason ...). What changed:"
            ]
            for line in moved:
                problem += _what_changed(name, line, entry.blobs.get(line, ""), versions[line])
            problems.append("\n".join(problem))
        else:
            problems.append(
                f"{name} changed on every line since its record, not through make port: after checking the "
                f"versions agree, pstool twins --accept {name}"
            )
    for name in sorted(set(entries) - set(found)):
        problems.append(f"{name}: twins.toml has a record of it, but no line carries it (pstool twins --forget {name})")
    return Report(out, problems)


def accept(names: list[str], reason: str = "") -> list[str]:
    """Record the named patches' current versions on every line as together (with a reason, on purpose)."""
    entries = load()
    found = carried()
    for name in names:
        versions = found.get(name)
        if not versions:
            raise PatchsetError(f"no line carries {name}")
        missing = [x for x in known_lines() if x not in versions]
        if missing:
            raise PatchsetError(f"{name} is not on {', '.join(missing)}: declare it with --only, or port it first")
        entries[name] = Entry(
            name,
            {line: fingerprint(data) for line, data in versions.items()},
            {line: blob_id(data) for line, data in versions.items()},
            differs=reason or (entries[name].differs if name in entries else ""),
        )
    save(entries)
    return names


def declare_only(line: str, names: list[str], reason: str) -> None:
    if not reason:
        raise PatchsetError("--only needs --reason: why the other lines do not carry it")
    entries = load()
    found = carried()
    for name in names:
        if sorted(found.get(name, {})) != [line]:
            raise PatchsetError(f"{name} is carried by {', '.join(sorted(found.get(name, {}))) or 'no line'}, not by {line} alone")
        entries[name] = Entry(name, only=[line], reason=reason)
    save(entries)


def forget(names: list[str]) -> None:
    entries = load()
    for name in names:
        if entries.pop(name, None) is None:
            raise PatchsetError(f"twins.toml has no record of {name}")
    save(entries)
