"""``pstool port``: one change, made once in one line's tree, carried to every other line.

::

    make checkout; make checkout LINE=3.4          # both trees match their exported series
    cd build/3.3/tree && $EDITOR ... && git commit -a --fixup <sha of the patch's commit>
    make port FROM=3.3 COMMIT=HEAD                 # 3.4 gets the same change, both lines re-exported

``COMMIT`` is a commit of the *source* line's tree on top of (or inside) its series:

- a ``fixup!``/``squash!``/``amend!`` commit of one patch: it is cherry-picked into each target
  line's tree (a real 3-way merge: git fetches the source commit and its parent, so the merge base
  is the source line's version of each file), re-addressed to the target's twin of that patch
  (``fixup! <twin sha>``) and squashed into it; the source's own fixup is squashed too;
- a new patch (a commit with a ``Feature:`` trailer and no ``Patch-Filename:``), or a patch of the
  source series that the target does not carry: it is cherry-picked and moved right after the
  target's twin of the patch before it, under the same file name.

Then both lines are exported and ``lines/twins.toml`` records the patch's new versions as together.
A conflict stops the port with the conflicting files and hunks printed, in the target tree, with
the cherry-pick (or the rebase that squashes it) in progress: resolve it there, ``git add``,
``git cherry-pick --continue`` or ``git rebase --continue``, then ``make port-continue``, which
resumes from the saved state (``build/port-state.json``). Nothing is exported before every tree is
through, so a stopped port never leaves one line's patches exported and another's not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pstool import PatchsetError
from pstool.git import git, out
from pstool.paths import BUILD_ROOT, for_line, known_lines
from pstool.series import parse_trailers
from pstool.tree import BASE_REF, commit_patch_names

STATE_FILE = BUILD_ROOT / "port-state.json"
FIXUP_PREFIXES = ("fixup! ", "squash! ", "amend! ")


class PortConflict(PatchsetError):
    """The change does not merge into a target tree by itself: a person must resolve it there."""


@dataclass
class PortState:
    """What a port does, saved before the first step so ``--continue`` can resume it."""

    source: str
    commit: str
    patch: str  # the patch name (Patch-Filename) the change belongs to, or becomes
    kind: str  # "fixup" or "new"
    targets: list[str]
    message: str  # the source commit's message (for a new patch: its message, trailers included)
    after: str = ""  # new patch: the patch name its twin goes after ("" = first)
    done: list[str] = field(default_factory=list)  # targets through their cherry-pick and squash
    stage: str = "start"  # per target: start -> picked -> placed

    def save(self) -> None:
        STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
        STATE_FILE.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls) -> PortState:
        if not STATE_FILE.exists():
            raise PatchsetError("no port in progress (nothing to continue)")
        return cls(**json.loads(STATE_FILE.read_text()))


def _tree(line: str) -> Path:
    return for_line(line).tree


def _pstool(line: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run pstool for another line (the paths of a line are read once per process)."""
    env = {**os.environ, "PATCHSET_LINE": line, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("PATCHSET_TREE", None)
    env.pop("PATCHSET_PATCHES", None)
    return subprocess.run([sys.executable, "-m", "pstool", *args], env=env, capture_output=True, text=True, check=False)


def _require_tree(line: str, *, clean: bool = True) -> Path:
    tree = _tree(line)
    if not (tree / ".git").exists():
        proc = _pstool(line, "checkout")
        if proc.returncode:
            raise PatchsetError(f"checking out the {line} line failed:\n{proc.stderr[-2000:]}")
    elif clean:
        proc = _pstool(line, "export", "--check")
        if proc.returncode:
            raise PatchsetError(
                f"{tree} and lines/{line}/patches disagree: export or discard that line's own edits first "
                f"(make export LINE={line} / make checkout LINE={line}):\n{proc.stderr[-1500:]}"
            )
    if clean and out(tree, "status", "--porcelain", "--untracked-files=no"):
        raise PatchsetError(f"{tree} has uncommitted changes; commit or stash them first")
    return tree


def _commits(tree: Path) -> list[tuple[str, str]]:
    """(sha, subject) of every commit after the base, oldest first."""
    rows = out(tree, "log", "--reverse", "--format=%H %s", f"{BASE_REF}..HEAD").splitlines()
    return [(row[:40], row[41:]) for row in rows]


def _names(tree: Path) -> dict[str, str]:
    """{commit sha: patch file name} of the tree's patch commits (fixups not squashed yet left out)."""
    return {sha: name for sha, name, _ in commit_patch_names(tree, skip_fixups=True)}


def _patch_commit(tree: Path, patch: str) -> str | None:
    return next((sha for sha, name in _names(tree).items() if name == patch), None)


def _fixup_target(tree: Path, commit: str, subject: str) -> str:
    """The patch a fixup commit belongs to (by the subject or sha after ``fixup! ``)."""
    wanted = subject.split(" ", 1)[1].strip() if " " in subject else ""
    names = _names(tree)
    matches = []
    for sha, other in _commits(tree):
        if sha == commit or sha not in names:
            continue
        if other == wanted or (len(wanted) >= 7 and sha.startswith(wanted)):
            matches.append(names[sha])
    if len(matches) != 1:
        raise PatchsetError(
            f"{commit[:12]} ({subject!r}) must fix exactly one patch of the series; it matches {len(matches)}"
        )
    return matches[0]


def plan(source: str, rev: str, targets: list[str] | None) -> PortState:
    """Work out what to do with ``rev`` of ``source``'s tree, before changing anything."""
    if source not in known_lines():
        raise PatchsetError(f"unknown line {source!r}; this repository carries {', '.join(known_lines())}")
    targets = targets or [x for x in known_lines() if x != source]
    bad = [t for t in targets if t not in known_lines() or t == source]
    if bad:
        raise PatchsetError(f"cannot port from {source} to {', '.join(bad)}")
    tree = _tree(source)
    if not (tree / ".git").exists():
        raise PatchsetError(f"{tree} does not exist: make checkout LINE={source}, then commit the change there")
    commit = out(tree, "rev-parse", "--verify", f"{rev}^{{commit}}")
    if git(tree, "merge-base", "--is-ancestor", BASE_REF, commit, check=False).returncode or commit == out(tree, "rev-parse", BASE_REF):
        raise PatchsetError(f"{rev} is not a commit of the {source} series (after {BASE_REF})")
    if git(tree, "merge-base", "--is-ancestor", commit, "HEAD", check=False).returncode:
        raise PatchsetError(f"{rev} is not on the {source} tree's HEAD")
    pending = [(sha, subj) for sha, subj in _commits(tree) if subj.startswith(FIXUP_PREFIXES) and sha != commit]
    if pending:
        # The port squashes the source tree's fixups and exports the source line: another pending
        # fixup would be squashed and exported on this line only, and its commit would be gone.
        listed = "; ".join(f"{sha[:12]} {subj!r}" for sha, subj in pending)
        raise PatchsetError(
            f"the {source} tree has other fixup commits not squashed yet ({listed}): a port carries one change, "
            "and squashing would take those into the source line's patches without porting them. Port one at a "
            "time: move the others out of the way (e.g. git branch keep <sha>; git reset --hard to before them), "
            "port this one, then cherry-pick the next back and port it"
        )
    message = out(tree, "log", "-1", "--format=%B", commit)
    subject = message.splitlines()[0]
    if subject.startswith(FIXUP_PREFIXES):
        return PortState(source, commit, _fixup_target(tree, commit, subject), "fixup", targets, message)
    if not parse_trailers(message).get("Feature"):
        raise PatchsetError(f"{commit[:12]} is neither a fixup! commit nor a patch (no Feature: trailer)")
    names = _names(tree)
    order = [sha for sha, _ in _commits(tree) if sha in names]
    index = order.index(commit)
    after = names[order[index - 1]] if index else ""
    return PortState(source, commit, names[commit], "new", targets, message, after=after)


def _show_conflict(tree: Path, what: str) -> str:
    files = out(tree, "diff", "--name-only", "--diff-filter=U")
    diff = git(tree, "diff", check=False).stdout.decode(errors="replace")
    shown = "\n".join(diff.splitlines()[:120])
    return (
        f"{what} stopped on a conflict in {tree}:\n  " + "\n  ".join(files.splitlines()) + f"\n\n{shown}\n\n"
        "Resolve it there (edit, git add), finish git's step (git cherry-pick --continue or git rebase --continue),"
        " then: make port-continue"
    )


def _squash(tree: Path, state: PortState, target: str) -> None:
    """Squash the picked fixup into its patch, or move the picked new patch to its place."""
    env = {"GIT_EDITOR": "true"}
    if state.kind == "fixup":
        env["GIT_SEQUENCE_EDITOR"] = "true"
    else:
        picked = out(tree, "rev-parse", "HEAD")
        anchor = _patch_commit(tree, state.after) if state.after else ""
        if state.after and not anchor:
            raise PatchsetError(f"the {target} line has no {state.after} to put {state.patch} after: port that one first")
        script = Path(tempfile.mkdtemp()) / "move.py"
        # git runs the sequence editor with the todo file as its last argument.
        script.write_text(
            "import sys\n"
            "picked, anchor, path = sys.argv[1], sys.argv[2], sys.argv[3]\n"
            "rows = open(path).read().splitlines()\n"
            "def names(row, sha):\n"
            "    return row.startswith('pick ') and sha.startswith(row.split()[1])\n"
            "mine = [r for r in rows if names(r, picked)]\n"
            "rest = [r for r in rows if r not in mine]\n"
            "at = 0 if anchor == '-' else 1 + next(i for i, r in enumerate(rest) if names(r, anchor))\n"
            "open(path, 'w').write('\\n'.join(rest[:at] + mine + rest[at:]) + '\\n')\n"
        )
        env["GIT_SEQUENCE_EDITOR"] = f"{sys.executable} {script} {picked} {anchor or '-'}"
    proc = git(tree, "rebase", "-q", "-i", "--autosquash", BASE_REF, env=env, check=False)
    if proc.returncode:
        raise PortConflict(_show_conflict(tree, f"squashing the change into {state.patch} on the {target} line"))


def _pick(tree: Path, state: PortState, target: str) -> None:
    """Cherry-pick the source commit into ``tree`` (3-way) and address it to the target's twin."""
    git(tree, "fetch", "-q", "--no-tags", str(_tree(state.source)), state.commit)
    proc = git(tree, "cherry-pick", "--no-commit", state.commit, check=False)
    if proc.returncode:
        state.stage = "picking"
        state.save()
        raise PortConflict(_show_conflict(tree, f"cherry-picking {state.commit[:12]} into the {target} line"))
    _commit_pick(tree, state, target)


def _commit_pick(tree: Path, state: PortState, target: str) -> None:
    author = out(_tree(state.source), "log", "-1", "--format=%an <%ae>", state.commit)
    date = out(_tree(state.source), "log", "-1", "--format=%aI", state.commit)
    if state.kind == "fixup":
        twin = _patch_commit(tree, state.patch)
        if twin is None:
            raise PatchsetError(f"the {target} line has no {state.patch}: nothing to fix (declare it --only, or port the patch)")
        message = f"fixup! {twin}\n"
    else:
        message = state.message
        if "Patch-Filename:" not in message:
            message = message.rstrip("\n") + f"\nPatch-Filename: {state.patch}\n"
    if not out(tree, "diff", "--cached", "--name-only"):
        raise PatchsetError(f"the change is already in the {target} line's tree: nothing to port")
    git(tree, "commit", "-q", "--no-verify", "--author", author, "--date", date, "-F", "-", input=message.encode())
    state.stage = "picked"
    state.save()


def _finish(state: PortState) -> list[str]:
    from pstool import twins

    if state.kind == "fixup":
        source = _tree(state.source)
        if any(s.startswith(FIXUP_PREFIXES) for _, s in _commits(source)):
            proc = git(source, "rebase", "-q", "-i", "--autosquash", BASE_REF,
                       env={"GIT_EDITOR": "true", "GIT_SEQUENCE_EDITOR": "true"}, check=False)
            if proc.returncode:
                raise PortConflict(_show_conflict(source, f"squashing the fixup into {state.patch} on the {state.source} line"))
    changed = []
    for line in [state.source, *state.targets]:
        proc = _pstool(line, "export")
        if proc.returncode:
            raise PatchsetError(f"exporting the {line} line failed:\n{proc.stderr[-2000:]}")
        changed.append(f"{line}: {proc.stdout.strip()}")
    versions = twins.carried().get(state.patch, {})
    if all(line in versions for line in known_lines()):
        twins.accept([state.patch])
    STATE_FILE.unlink(missing_ok=True)
    return changed


def _run(state: PortState) -> list[str]:
    from pstool import twins

    declared = twins.load().get(state.patch)
    for target in state.targets:
        if target in state.done:
            continue
        tree = _tree(target)
        if state.kind == "fixup" and declared and declared.only and target not in declared.only:
            print(f"{target}: does not carry {state.patch} ({declared.reason}): nothing to port there")
            state.done.append(target)
            continue
        if state.stage == "start":
            _require_tree(target)
            _pick(tree, state, target)
        elif state.stage == "picking":
            if out(tree, "diff", "--name-only", "--diff-filter=U"):
                raise PortConflict(_show_conflict(tree, f"the cherry-pick into the {target} line is still"))
            if (tree / ".git" / "CHERRY_PICK_HEAD").exists() or out(tree, "diff", "--cached", "--name-only"):
                git(tree, "cherry-pick", "--quit", check=False)
                _commit_pick(tree, state, target)
            else:
                raise PatchsetError(f"the cherry-pick into {tree} left nothing staged; resolve it, git add, then make port-continue")
        if state.stage == "picked":
            _squash(tree, state, target)
        elif state.stage == "squashing":
            if (tree / ".git" / "rebase-merge").exists():
                raise PortConflict(_show_conflict(tree, f"the rebase of the {target} line is still"))
        state.done.append(target)
        state.stage = "start"
        state.save()
    return _finish(state)


def port(source: str, rev: str, targets: list[str] | None = None) -> list[str]:
    """Carry ``rev`` of ``source``'s tree into the other lines' trees; return the export summary."""
    if STATE_FILE.exists():
        raise PatchsetError(f"a port is in progress ({STATE_FILE}): make port-continue, or delete the file to abandon it")
    state = plan(source, rev, targets)
    for target in state.targets:
        _require_tree(target)
    state.save()
    try:
        return _run(state)
    except PortConflict:
        if state.stage == "picked":
            state.stage = "squashing"
        state.save()
        raise


def resume() -> list[str]:
    state = PortState.load()
    try:
        return _run(state)
    except PortConflict:
        if state.stage == "picked":
            state.stage = "squashing"
        state.save()
        raise
