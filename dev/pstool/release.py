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
"""``pstool release`` (``make release``): cut a release of the patch set, named by its label.

1. The lines move together: every line's label (``lines/<line>/upstream.lock``, ``[patchset]
   local_version``) is the same ``ps.N``; the release makes it ``ps.N+1`` on every line.
2. ``CHANGELOG.md`` gets an entry, newest first: per line, the upstream release, the tag and the
   series hash; the newsfragments the series carries (the files its patches add under
   ``*/newsfragments/``), per feature; and the series diff since the previous release (patches
   added, changed and removed per line, against ``lines/<line>/patches`` at the previous release's
   tag; the first release lists each feature's patches).
3. ``lines/releases.toml`` records the label, date, tags and each line's series hash
   (``pstool.releases``): ``make image`` refuses to build a released label from another series.
4. One commit ("Release ps.N+1") holds the two locks, the changelog and the record, and every line's
   tag names it: ``v<upstream release>-ps.N+1`` (``v3.3.2-ps.2``, ``v3.4.0b2-ps.2``), the image's tag
   (``airflow-patchset:3.3.2-ps.2``) with a ``v``. Annotated tags; nothing is pushed.

The working tree must be clean (the release is what is committed). ``--dry-run`` prints the entry
and changes nothing. docs/development/release.md is the process.
"""

from __future__ import annotations

import datetime
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pstool import PatchsetError
from pstool.paths import ROOT, for_line, known_lines
from pstool.releases import LABEL_RE, RELEASES_FILE, line_label, line_series_hash, load_releases

CHANGELOG = ROOT / "CHANGELOG.md"
CHANGELOG_HEAD = """\
# Changelog

Every release of airflow-patchset, newest first. `make release` writes each entry
([docs/development/release.md](docs/development/release.md)): the label the patched wheels and the
image carry (`3.3.2+ps.N`, `airflow-patchset:3.3.2-ps.N`), each line's git tag and series hash (what
`airflow-patchset check` prints inside an image), the newsfragments the series carries, per feature,
and the patches added, changed and removed since the previous release.
"""
MARKER = "<!-- make release adds each release below this line -->"


def _git(*args: str, root: Path = ROOT, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise PatchsetError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def next_label(label: str) -> str:
    match = LABEL_RE.fullmatch(label)
    if not match:
        raise PatchsetError(f"the label {label!r} is not ps.N: make release counts ps.1, ps.2, ...")
    return f"ps.{int(match.group(1)) + 1}"


def tag_name(release: str, label: str) -> str:
    """``v3.3.2-ps.2``: the image's tag ``airflow-patchset:3.3.2-ps.2`` as a git tag."""
    return f"v{release}-{label}"


# --- newsfragments ---------------------------------------------------------------------------


def added_files(body: bytes) -> dict[str, str]:
    """{path: text} of every file a patch creates (its ``+`` lines)."""
    files: dict[str, list[str]] = {}
    current, new = None, False
    for line in body.decode("utf-8", "replace").splitlines():
        if line.startswith("diff --git a/"):
            current, new = line.split(" b/", 1)[1], False
        elif line.startswith("new file mode") and current:
            new = True
            files[current] = []
        elif new and current and line.startswith("+") and not line.startswith("+++"):
            files[current].append(line[1:])
    return {path: "\n".join(lines) for path, lines in files.items()}


def fragment_text(text: str) -> str:
    """A newsfragment's prose: a significant one's template sections ("* Types of change", ...) cut."""
    kept = []
    for line in text.splitlines():
        if line.startswith("* Types of change") or line.startswith("* Migration rules needed"):
            break
        kept.append(line)
    return "\n".join(kept).strip()


@dataclass
class Fragment:
    feature: str
    path: str
    text: str
    lines: list[str] = field(default_factory=list)


def newsfragments(lines: list[str]) -> list[Fragment]:
    """The newsfragments the series of ``lines`` carry, once each (with the lines carrying it), in series order."""
    from pstool.series import load_series

    found: dict[tuple[str, str, str], Fragment] = {}
    for line in lines:
        for patch in load_series(for_line(line).patches_dir):
            for path, text in added_files(patch.body).items():
                if "/newsfragments/" not in path:
                    continue
                prose = fragment_text(text)
                key = (patch.feature, path.rsplit("/", 1)[1], prose)
                found.setdefault(key, Fragment(patch.feature, path, prose)).lines.append(line)
    return list(found.values())


# --- series diff -------------------------------------------------------------------------------


def _patch_files(line: str, ref: str | None, root: Path) -> dict[str, bytes]:
    """{name under patches/: bytes} of ``line``'s patches at ``ref`` (``None``: the working tree)."""
    patches_dir = for_line(line).patches_dir
    if ref is None:
        return {p.relative_to(patches_dir).as_posix(): p.read_bytes() for p in patches_dir.rglob("*.patch")}
    rel = patches_dir.relative_to(root).as_posix()
    names = _git("ls-tree", "-r", "--name-only", ref, "--", rel, root=root).split()
    result = {}
    for name in names:
        if name.endswith(".patch"):
            blob = subprocess.run(["git", "show", f"{ref}:{name}"], cwd=root, capture_output=True, check=True).stdout
            result[name[len(rel) + 1:]] = blob
    return result


def series_diff(line: str, previous_ref: str | None, root: Path = ROOT) -> dict[str, list[str]]:
    """{"added"|"changed"|"removed": patch names} of ``line`` since ``previous_ref``."""
    now = _patch_files(line, None, root)
    before = _patch_files(line, previous_ref, root) if previous_ref else {}
    return {
        "added": sorted(set(now) - set(before)),
        "changed": sorted(n for n in set(now) & set(before) if now[n] != before[n]),
        "removed": sorted(set(before) - set(now)),
    }


# --- the entry ---------------------------------------------------------------------------------


def entry(label: str, date: str, previous: dict | None, root: Path = ROOT) -> str:
    from pstool.lock import load_lock

    lines = known_lines()
    out = [f"## {label} ({date})", ""]
    out += ["| Line | Upstream release | Tag | Series hash (`lines/<line>/patches`) |", "|---|---|---|---|"]
    for line in lines:
        release = load_lock(for_line(line).lock_file).release
        out.append(f"| {line} | {release} | `{tag_name(release, label)}` | `{line_series_hash(line)}` |")
    out.append("")
    previous_ref = (previous.get("tags") or [None])[0] if previous else None
    out += ["### Changes (newsfragments)", ""]
    fragments = newsfragments(lines)
    if not fragments:
        out += ["No newsfragment in the series.", ""]
    by_feature: dict[str, list[Fragment]] = {}
    for fragment in fragments:
        by_feature.setdefault(fragment.feature, []).append(fragment)
    for feature, items in by_feature.items():
        out.append(f"**{feature}**")
        out.append("")
        for fragment in items:
            where = "" if fragment.lines == lines else f" (only {', '.join(fragment.lines)})"
            body = fragment.text.replace("\n", "\n  ")
            out.append(f"- `{fragment.path.rsplit('/', 1)[1]}`{where}: {body}")
        out.append("")
    title = f"since {previous['label']} (`{previous_ref}`)" if previous else "(the first release by `make release`: the whole series)"
    out += [f"### Series {title}", ""]
    for line in lines:
        diff = series_diff(line, previous_ref, root)
        out.append(f"**{line}**:")
        out.append("")
        if previous is None:
            counts: dict[str, int] = {}
            for name in diff["added"]:
                feature = name.split("/", 1)[0]
                counts[feature] = counts.get(feature, 0) + 1
            total = sum(counts.values())
            out.append(f"- {total} patches: " + ", ".join(f"{feature} {n}" for feature, n in counts.items()))
        elif not any(diff.values()):
            out.append("- no patch changed")
        else:
            for kind in ("added", "changed", "removed"):
                for name in diff[kind]:
                    out.append(f"- {kind}: `{name}`")
        out.append("")
    return re.sub(r"[ \t]+$", "", "\n".join(out), flags=re.M)


def write_changelog(text: str, path: Path = CHANGELOG) -> None:
    current = path.read_text() if path.is_file() else f"{CHANGELOG_HEAD}\n{MARKER}\n"
    if MARKER not in current:
        raise PatchsetError(f"{path.name} lacks the line {MARKER!r}: make release adds entries below it")
    head, tail = current.split(MARKER, 1)
    path.write_text(f"{head}{MARKER}\n\n{text.rstrip()}\n{tail.rstrip()}\n".replace("\n\n\n", "\n\n"))


def record(label: str, date: str, tags: list[str], hashes: dict[str, str], path: Path = RELEASES_FILE) -> None:
    head = (
        "# Every release of the patch set (make release; docs/development/release.md, pstool.releases): its\n"
        "# label, date, git tags and each line's series hash (sha256 of lines/<line>/patches). make image\n"
        "# refuses to build a label recorded here from any other series.\n"
    )
    current = path.read_text() if path.is_file() else head
    series = ", ".join(f'"{line}" = "{digest}"' for line, digest in hashes.items())
    block = (
        f'\n[[release]]\nlabel = "{label}"\ndate = "{date}"\n'
        f"tags = [{', '.join(repr(t).replace(chr(39), chr(34)) for t in tags)}]\nseries = {{ {series} }}\n"
    )
    path.write_text(current.rstrip("\n") + "\n" + block)


def bump_lock(lock_file: Path, old: str, new: str) -> None:
    text = lock_file.read_text()
    bumped, count = re.subn(rf'^local_version = "{re.escape(old)}"$', f'local_version = "{new}"', text, flags=re.M)
    if count != 1:
        raise PatchsetError(f"{lock_file}: found no single `local_version = \"{old}\"` line to bump")
    lock_file.write_text(bumped)


def release(*, dry_run: bool = False, date: str | None = None, root: Path = ROOT) -> str:
    """Cut the next release; return its label."""
    from pstool.lock import load_lock

    lines = known_lines()
    labels = {line: line_label(line) for line in lines}
    if len(set(labels.values())) != 1:
        raise PatchsetError(
            "the lines' labels differ (" + ", ".join(f"{line}: {label}" for line, label in labels.items())
            + "); the lines are released together: make them equal first"
        )
    current = labels[lines[0]]
    label = next_label(current)
    if not dry_run and _git("status", "--porcelain", root=root).strip():
        raise PatchsetError("the working tree has uncommitted changes: commit them (the release is what is committed)")
    date = date or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    releases = load_releases()
    previous = releases[-1] if releases else None
    if previous and previous.get("label") != current:
        raise PatchsetError(
            f"the last recorded release is {previous.get('label')}, but the lines' label is {current}; "
            f"{RELEASES_FILE.name} and the locks disagree"
        )
    tags = [tag_name(load_lock(for_line(line).lock_file).release, label) for line in lines]
    existing = [t for t in tags if _git("tag", "--list", t, root=root).strip()]
    if existing:
        raise PatchsetError(f"the tag(s) {', '.join(existing)} exist already")
    text = entry(label, date, previous, root)
    if dry_run:
        print(text)
        return label
    for line in lines:
        bump_lock(for_line(line).lock_file, current, label)
    write_changelog(text)
    record(label, date, tags, {line: line_series_hash(line) for line in lines})
    paths = [str(for_line(line).lock_file.relative_to(root)) for line in lines]
    paths += [str(CHANGELOG.relative_to(root)), str(RELEASES_FILE.relative_to(root))]
    _git("add", "--", *paths, root=root)
    summary = ", ".join(f"{line} {t}" for line, t in zip(lines, tags))
    message = f"Release {label}: {summary}\n\nCHANGELOG.md has the entry; lines/releases.toml the series hashes."
    _git("commit", "-q", "-m", message, root=root)
    for tag in tags:
        _git("tag", "-a", tag, "-m", f"airflow-patchset {label} ({tag})", root=root)
    print(f"release: {label} committed and tagged {', '.join(tags)} (nothing pushed)")
    return label
