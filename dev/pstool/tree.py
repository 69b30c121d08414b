"""Materialize pristine upstream as a git tree, apply the series, export it back."""

from __future__ import annotations

import hashlib
import re
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path

from pstool import PatchsetError
from pstool.git import BASE_DATE, git, out, strict_am
from pstool.layout import wheel_to_tree
from pstool.lock import Lock, fetch, load_lock
from pstool.paths import PATCHES_DIR, cache_dir, tree_dir
from pstool.series import (
    INTERNAL_TRAILERS,
    WHEN_TRAILER,
    Patch,
    add_trailer,
    features_in_order,
    full_selection,
    load_series,
    message_of,
    parse_trailers,
    strip_trailers,
)

BASE_REF = "refs/patches/upstream-base"
FORMAT_PATCH_ARGS = (
    "format-patch",
    "--keep-subject",
    "--no-stat",
    "--no-signature",
    "--zero-commit",
    "--full-index",
    "--no-renames",
    "--stdout",
)


def base_tag(lock: Lock) -> str:
    return f"upstream/{lock.release}"


def populate_pristine(dest: Path, lock: Lock, files: dict[str, Path]) -> None:
    """Write every pinned wheel's files into ``dest`` in the monorepo layout.

    A shared library ships in both core and task-sdk; both copies must be byte-identical and
    become the one upstream path ``shared/<lib>/src/airflow_shared/<lib>``.
    """
    written: dict[str, bytes] = {}
    for pinned in lock.wheels:
        with zipfile.ZipFile(files[pinned.file]) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                target = wheel_to_tree(pinned.name, info.filename)
                if target is None:
                    continue
                data = zf.read(info)
                if target in written:
                    if written[target] != data:
                        raise PatchsetError(
                            f"{info.filename} in {pinned.file} differs from the copy already placed at "
                            f"{target}; the shared-library mapping would lose one of them"
                        )
                    continue
                written[target] = data
                path = dest / target
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
    # Upstream's git keeps each shared library once and symlinks it into both distributions.
    libs = sorted({t.split("/")[1] for t in written if t.startswith("shared/")})
    for lib in libs:
        for link_dir, up in (("airflow-core/src/airflow/_shared", "../../../.."), ("task-sdk/src/airflow/sdk/_shared", "../../../../..")):
            link = dest / link_dir / lib
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(f"{up}/shared/{lib}/src/airflow_shared/{lib}")
    for pinned in lock.sources:
        with tarfile.open(files[pinned.file]) as tf:
            top = tf.getnames()[0].split("/", 1)[0]
            for directory in pinned.directories:
                _extract_directory(tf, f"{top}/", directory, pinned, dest)
            for member in pinned.members:
                fh = tf.extractfile(f"{top}/{member}")
                if fh is None:
                    raise PatchsetError(f"{pinned.file} has no member {member}")
                path = dest / pinned.tree_prefix / member
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(fh.read())


def _extract_directory(tf: tarfile.TarFile, top: str, directory: str, pinned, dest: Path) -> None:
    """Lay every regular file under ``directory`` of an sdist into the tree, minus ``exclude``."""
    prefix = f"{top}{directory.rstrip('/')}/"
    excluded = tuple(f"{top}{e.rstrip('/')}/" for e in pinned.exclude)
    count = 0
    for info in tf.getmembers():
        if not info.name.startswith(prefix) or info.name.startswith(excluded):
            continue
        if info.issym():
            raise PatchsetError(f"{pinned.file}: {info.name} is a symlink; not expected in the UI source")
        if not info.isfile():
            continue
        fh = tf.extractfile(info)
        assert fh is not None
        path = dest / pinned.tree_prefix / info.name[len(top) :]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(fh.read())
        count += 1
    if not count:
        raise PatchsetError(f"{pinned.file} has no files under {directory}")


def _base_key(lock: Lock) -> str:
    """What the pristine base is made of: a lock that lays more (or other) files is another base."""
    return hashlib.sha256(repr((lock.commit, lock.wheels, lock.sources)).encode()).hexdigest()[:12]


def base_repo(lock: Lock | None = None) -> Path:
    """The pristine base commit in a repository of its own, made once per pins: ``base-<key>`` in the
    download cache (:func:`pstool.paths.cache_dir`), next to the pinned files it is made of.

    Every tree (``checkout``, ``scratch_tree``, pstool's tests' throwaway trees) is a local clone of
    it, so laying out the sdists and wheels and hashing their files into git happens once, not per
    tree. It is built in a temporary directory and renamed into place when complete, so a build that
    is killed, or another process building it at the same time, never leaves a half one in use.
    """
    lock = lock or load_lock()
    repo = cache_dir() / f"base-{_base_key(lock)}"

    def complete() -> bool:
        return (repo / ".git").exists() and git(repo, "tag", "-l", base_tag(lock), check=False).stdout.decode().strip() == base_tag(lock)

    if complete():
        return repo
    repo.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{repo.name}.", dir=repo.parent))
    try:
        _make_base(building, lock)
        if repo.exists() and not complete():
            shutil.rmtree(repo)  # not one this function renamed into place
        try:
            building.rename(repo)
        except OSError:
            if not complete():  # not another process's finished one
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return repo


def _make_base(repo: Path, lock: Lock) -> None:
    """Lay the pinned files out in ``repo`` (an empty directory) and commit them: the base commit."""
    files = fetch(lock, quiet=True)
    git(repo, "init", "-q")
    _write_excludes(repo)
    populate_pristine(repo, lock, files)
    git(repo, "add", "-A")
    dists = ", ".join(f"{w.name} {w.version}" for w in lock.wheels)
    sources = ", ".join(f"{s.file}" for s in lock.sources)
    message = (
        f"Apache Airflow {lock.release} (pristine upstream)\n\n"
        f"Materialized from the pinned wheels: {dists};\nand from the sdists: {sources}.\n\n"
        f"Upstream-Commit: {lock.commit}\n"
    )
    env = {"GIT_AUTHOR_DATE": BASE_DATE, "GIT_COMMITTER_DATE": BASE_DATE}
    git(repo, "commit", "-q", "-m", message, env=env)
    git(repo, "tag", "-f", base_tag(lock))


def _write_excludes(repo: Path) -> None:
    """Byte-code from running code in a tree, and the generator settings `regenerate` places at the
    root for a moment, must never end up in the base or in a patch."""
    (repo / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text(
        "__pycache__/\n*.pyc\n/pyproject.toml\n/scripts/\nnode_modules/\n/airflow-core/src/airflow/ui/dist/\n"
    )


def init_base(tree: Path, lock: Lock | None = None) -> str:
    """Create ``tree`` as a git repo holding one commit of pristine upstream (a clone of
    :func:`base_repo`, on branch ``main``); return its sha."""
    lock = lock or load_lock()
    repo = base_repo(lock)
    if tree.exists():
        shutil.rmtree(tree)
    tree.parent.mkdir(parents=True, exist_ok=True)
    git(tree.parent, "clone", "-q", "--no-checkout", str(repo), tree.name)
    git(tree, "remote", "remove", "origin")
    _write_excludes(tree)
    git(tree, "checkout", "-q", "-B", "main", base_tag(lock))
    git(tree, "update-ref", BASE_REF, "HEAD")
    return out(tree, "rev-parse", "HEAD")


def apply_series(tree: Path, patches: list[Patch], *, allow_offset: bool = False) -> int:
    """``git am`` each patch strictly (see ``strict_am``); return how many hunks sat at an offset.

    Each commit gets a ``Patch-Filename`` trailer (and ``Series-When`` for a conditional entry)
    so that ``export`` writes it back to the same file and series line.
    """
    offsets = 0
    for patch in patches:
        data = add_trailer(patch.body, "Patch-Filename", patch.name)
        if patch.when:
            data = add_trailer(data, WHEN_TRAILER, " ".join(patch.when))
        offsets += len(strict_am(tree, patch.name, data, allow_offset=allow_offset))
    return offsets


def checkout(tree: Path | None = None, *, quiet: bool = False) -> Path:
    """build/<line>/tree = pristine base + the full series (every feature and the integration patches)."""
    tree = tree or tree_dir()
    patches = full_selection(load_series())
    base = init_base(tree)
    apply_series(tree, patches)
    git(tree, "branch", "-f", "patched", "HEAD")
    if not quiet:
        print(f"{tree}: base {base[:12]} ({BASE_REF}) + {len(patches)} patches applied strictly")
    return tree


def _slug(subject: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", subject).strip("-").lower()
    return slug[:60].rstrip("-") or "patch"


def commit_patch_names(tree: Path, *, skip_fixups: bool = False) -> list[tuple[str, str, str]]:
    """(commit sha, patch file name, feature) for every commit after the base, in order.

    The name comes from the ``Patch-Filename`` trailer that checkout adds; a new commit gets
    ``<feature>/<NNNN>-<slug of subject>.patch`` from its ``Feature`` trailer. ``skip_fixups``
    leaves out ``fixup!``/``squash!``/``amend!`` commits not squashed yet (pstool.port).
    """
    commits = out(tree, "rev-list", "--reverse", f"{BASE_REF}..HEAD").split()
    result: list[tuple[str, str, str]] = []
    for sha in commits:
        message = out(tree, "log", "-1", "--format=%B", sha)
        trailers = parse_trailers(message)
        feature = trailers.get("Feature", "")
        subject = out(tree, "log", "-1", "--format=%s", sha)
        if skip_fixups and subject.startswith(("fixup! ", "squash! ", "amend! ")):
            continue
        if not feature:
            raise PatchsetError(f"commit {sha[:12]} ({subject!r}) has no Feature: trailer")
        name = trailers.get("Patch-Filename")
        if not name:
            number = sum(1 for _, _, f in result if f == feature) + 1
            name = f"{feature}/{number:04d}-{_slug(subject)}.patch"
        if any(name == n for _, n, _ in result):
            raise PatchsetError(f"two commits export to {name}")
        result.append((sha, name, feature))
    return result


def render_series(tree: Path) -> dict[str, bytes]:
    """Format every commit after the base as a patch file; return {relative path: bytes}."""
    rendered: dict[str, bytes] = {}
    order: list[tuple[str, str, str]] = []
    for sha, name, feature in commit_patch_names(tree):
        data = git(tree, *FORMAT_PATCH_ARGS, "-1", sha).stdout
        when = parse_trailers(out(tree, "log", "-1", "--format=%B", sha)).get(WHEN_TRAILER, "")
        if feature == "integration" and not when:
            raise PatchsetError(f"integration commit {sha[:12]} has no {WHEN_TRAILER}: trailer (e.g. 'asset-emit aip-97')")
        rendered[name] = strip_trailers(data, ("Patch-Filename", WHEN_TRAILER))
        order.append((name, feature, when))
    lines = [
        "# airflow-patchset series, applied in this order with strict `git am` (pstool checkout).",
        "# One patch is one future upstream PR; its trailers name the feature, its upstream status",
        "# and the features it depends on. Regenerated by `pstool export`: edit the tree, not this file.",
    ]
    lines += [
        "# A line may end in 'when: <features>' ('!f': f absent): it applies only to a selection where",
        "# that holds. Integration patches (patches/integration/) reconcile two features and apply only",
        "# when both are selected; pstool export-upstream never includes them.",
    ]
    current = None
    for name, feature, when in order:
        group = feature if feature != "integration" else name.rsplit("/", 1)[0]
        if group != current:
            lines += ["", f"# feature: {feature}" if feature != "integration" else f"# {group}"]
            current = group
        lines.append(f"{name}  when: {when}" if when else name)
    rendered["series"] = ("\n".join(lines) + "\n").encode()
    return rendered


def existing_patch_files(patches_dir: Path = PATCHES_DIR) -> dict[str, bytes]:
    found = {}
    if patches_dir.exists():
        for path in sorted(patches_dir.rglob("*.patch")):
            found[path.relative_to(patches_dir).as_posix()] = path.read_bytes()
        if (patches_dir / "series").exists():
            found["series"] = (patches_dir / "series").read_bytes()
    return found


def export(tree: Path | None = None, *, check: bool = False, patches_dir: Path = PATCHES_DIR) -> list[str]:
    """Rewrite ``patches/`` from the tree; with ``check`` only report what would change."""
    tree = tree or tree_dir()
    if not (tree / ".git").exists():
        raise PatchsetError(f"{tree} is not a checkout; run `pstool checkout` first")
    rendered = render_series(tree)
    current = existing_patch_files(patches_dir)
    changed = sorted(
        name for name in set(rendered) | set(current) if rendered.get(name) != current.get(name)
    )
    if check:
        return changed
    for name in changed:
        path = patches_dir / name
        if name in rendered:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(rendered[name])
        else:
            path.unlink()
    for sub in sorted(patches_dir.iterdir(), reverse=True) if patches_dir.exists() else []:
        if sub.is_dir() and not any(sub.iterdir()):
            sub.rmdir()
    return changed


def scratch_tree(parent: Path | None = None) -> Path:
    """A fresh pristine tree in a temp dir (a clone of :func:`base_repo`)."""
    dest = Path(tempfile.mkdtemp(prefix="pstool-", dir=parent))
    init_base(dest)
    return dest


def feature_names(patches: list[Patch]) -> list[str]:
    return features_in_order(patches)
