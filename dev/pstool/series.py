"""The patch series: ``patches/series`` plus the git format-patch files it names.

A series line is a patch file, optionally followed by a condition::

    aip-97/0001-add-taskfailurecause.patch
    integration/asset-emit+aip-97/0001-withdraw-asset-emit-s-shared-registrations.patch  when: asset-emit aip-97

A feature's patch applies when its feature is selected (and its condition holds, if it has one,
e.g. a glue patch ``when: aip-97 !asset-emit``). An integration patch (``Feature: integration``,
under ``patches/integration/<a>+<b>/``) applies only when its condition holds: every feature it
names is selected and no ``!feature`` is. Integration patches reconcile what two independent
features each claim in one place (the migration chain head, a Cadwyn version); they are never
exported upstream. ``select_patches`` is the one place that decides what a feature set applies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.parser import BytesHeaderParser
from pathlib import Path

from pstool import PatchsetError
from pstool.paths import PATCHES_DIR, SERIES_FILE

REQUIRED_TRAILERS = ("Feature", "Upstream-Status", "Depends")
INTERNAL_TRAILERS = ("Feature", "Upstream-Status", "Depends", "Patch-Filename", "Series-When")
INTEGRATION = "integration"
WHEN_TRAILER = "Series-When"  # carries a series condition through build/tree (checkout -> export)
_TRAILER_RE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):\s*(.*)$")


@dataclass(frozen=True)
class Patch:
    name: str  # relative to patches/, e.g. "aip-97/0001-foo.patch"
    path: Path
    subject: str
    trailers: dict[str, str]
    body: bytes
    when: tuple[str, ...] = ()  # the series condition: feature names, "!name" for absent

    @property
    def feature(self) -> str:
        return self.trailers.get("Feature", "")

    @property
    def is_integration(self) -> bool:
        return self.feature == INTEGRATION

    @property
    def depends(self) -> tuple[str, ...]:
        raw = self.trailers.get("Depends", "").strip()
        if raw.lower() in ("", "none", "-"):
            return ()
        return tuple(sorted({d.strip() for d in raw.split(",") if d.strip()}))


_WHEN_TERM = re.compile(r"!?[a-z0-9][a-z0-9.-]*")


def parse_when(text: str, where: str = "series") -> tuple[str, ...]:
    """``"asset-emit aip-97 !aip-122"`` -> ``("asset-emit", "aip-97", "!aip-122")``."""
    terms = tuple(text.replace(",", " ").split())
    bad = [t for t in terms if not _WHEN_TERM.fullmatch(t)]
    if bad or not terms:
        raise PatchsetError(f"{where}: bad condition {text!r} (want feature names, '!name' for absent)")
    if {t.lstrip("!") for t in terms if t.startswith("!")} & {t for t in terms if not t.startswith("!")}:
        raise PatchsetError(f"{where}: condition {text!r} names a feature both present and absent")
    return terms


def read_series_entries(series_file: Path = SERIES_FILE) -> list[tuple[str, tuple[str, ...]]]:
    """(patch name, condition) in order; '#' starts a comment; ``name  when: a b !c``."""
    if not series_file.exists():
        return []
    entries = []
    for lineno, raw in enumerate(series_file.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, cond = line.partition(" when:")
        name = name.strip()
        if not name.endswith(".patch") or " " in name:
            raise PatchsetError(f"{series_file}:{lineno}: {line!r} is not a .patch file (optionally 'when: ...')")
        entries.append((name, parse_when(cond, f"{series_file}:{lineno}") if sep else ()))
    return entries


def read_series(series_file: Path = SERIES_FILE) -> list[str]:
    """Patch names in order; '#' starts a comment."""
    return [name for name, _ in read_series_entries(series_file)]


def condition_holds(when: tuple[str, ...], features: set[str] | frozenset[str]) -> bool:
    return all((t[1:] not in features) if t.startswith("!") else (t in features) for t in when)


def select_patches(patches: list[Patch], features: set[str] | frozenset[str]) -> list[Patch]:
    """The patches a tree with exactly ``features`` applies, in series order.

    A feature's patch: its feature is selected and its condition (if any) holds. An integration
    patch: its condition holds (it has one; ``check_trailers`` insists).
    """
    selected = []
    for patch in patches:
        if patch.is_integration:
            if patch.when and condition_holds(patch.when, features):
                selected.append(patch)
        elif patch.feature in features and condition_holds(patch.when, features):
            selected.append(patch)
    return selected


_BOUNDARY = re.compile(rb"\n(?:---\n|diff --git )")


def split_patch(data: bytes) -> tuple[bytes, bytes]:
    """Split a format-patch mbox into (headers + message, the rest from '---' or 'diff --git')."""
    header_end = data.find(b"\n\n")
    match = _BOUNDARY.search(data, header_end if header_end >= 0 else 0)
    if not match:
        raise PatchsetError("patch has no '---' or 'diff --git' after its message")
    return data[: match.start() + 1], data[match.start() + 1 :]


def message_of(data: bytes) -> str:
    """The commit message (subject excluded) of a format-patch mbox."""
    head, _ = split_patch(data)
    _, sep, msg = head.partition(b"\n\n")
    return msg.decode("utf-8", "replace") if sep else ""


def parse_trailers(message: str) -> dict[str, str]:
    """Trailers of the last paragraph of a commit message."""
    paragraphs = [p for p in message.strip().split("\n\n") if p.strip()]
    if not paragraphs:
        return {}
    trailers = {}
    for line in paragraphs[-1].splitlines():
        match = _TRAILER_RE.match(line.strip())
        if match:
            trailers[match.group(1)] = match.group(2).strip()
    return trailers


def load_patch(name: str, patches_dir: Path = PATCHES_DIR, when: tuple[str, ...] = ()) -> Patch:
    path = patches_dir / name
    if not path.is_file():
        raise PatchsetError(f"series names {name}, but {path} does not exist")
    data = path.read_bytes()
    if not data.startswith(b"From "):
        raise PatchsetError(f"{name}: not a git format-patch mbox (no 'From ' line)")
    headers = BytesHeaderParser().parsebytes(data.split(b"\n\n", 1)[0])
    subject = " ".join(str(headers.get("Subject", "")).split())
    if not subject or not headers.get("From") or not headers.get("Date"):
        raise PatchsetError(f"{name}: missing From/Date/Subject header")
    return Patch(name, path, subject, parse_trailers(message_of(data)), data, when)


def load_series(patches_dir: Path = PATCHES_DIR) -> list[Patch]:
    return [load_patch(n, patches_dir, when) for n, when in read_series_entries(patches_dir / "series")]


def features_in_order(patches: list[Patch]) -> list[str]:
    """The features of the series (integration patches belong to none), in series order."""
    seen: list[str] = []
    for patch in patches:
        if patch.feature not in seen and not patch.is_integration:
            seen.append(patch.feature)
    return seen


def full_selection(patches: list[Patch]) -> list[Patch]:
    """The full series: every feature, and every integration patch whose condition holds."""
    return select_patches(patches, set(features_in_order(patches)))


def dependency_closure(feature: str, patches: list[Patch]) -> set[str]:
    deps_of: dict[str, set[str]] = {}
    for patch in patches:
        if patch.is_integration:
            continue
        deps_of.setdefault(patch.feature, set()).update(patch.depends)
    closure: set[str] = set()
    todo = [feature]
    while todo:
        current = todo.pop()
        if current in closure:
            continue
        closure.add(current)
        todo.extend(deps_of.get(current, ()))
    return closure


def add_trailer(data: bytes, key: str, value: str) -> bytes:
    """Insert ``key: value`` as the last trailer of a format-patch message."""
    head, rest = split_patch(data)
    return head.rstrip(b"\n") + f"\n{key}: {value}\n\n".encode() + rest


def strip_trailers(data: bytes, keys: tuple[str, ...]) -> bytes:
    """Remove trailer lines named in ``keys`` from the message part of a patch."""
    head, rest = split_patch(data)
    lines = head.rstrip(b"\n").split(b"\n")
    kept = [ln for ln in lines if not any(ln.startswith(k.encode() + b":") for k in keys)]
    while kept and kept[-1] == b"":
        kept.pop()
    return b"\n".join(kept) + b"\n\n" + rest
