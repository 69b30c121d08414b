"""Read ``upstream.lock`` and fetch/verify the pinned upstream files."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import time
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from pstool import PatchsetError
from pstool.paths import LOCK_FILE, cache_dir


@dataclass(frozen=True)
class PinnedFile:
    """One pinned upstream file: a wheel, or an sdist from which a few members are taken."""

    name: str
    version: str
    file: str
    sha256: str
    kind: str  # "wheel", "sdist" or "tool"
    members: tuple[str, ...] = ()
    tree_prefix: str = ""
    directories: tuple[str, ...] = ()  # sdist directories laid into the tree whole...
    exclude: tuple[str, ...] = ()  # ...except these sub-directories (built output)
    registry: str = "pypi"  # where a tool comes from: "pypi" (a wheel) or "npm" (a tarball)

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Lock:
    release: str
    commit: str
    wheels: tuple[PinnedFile, ...]
    sources: tuple[PinnedFile, ...] = field(default_factory=tuple)
    tools: tuple[PinnedFile, ...] = field(default_factory=tuple)

    def wheel(self, name: str) -> PinnedFile:
        for pinned in self.wheels:
            if pinned.name == name:
                return pinned
        raise PatchsetError(f"{name} is not pinned in {LOCK_FILE.name}")

    def tool(self, name: str) -> PinnedFile:
        for pinned in self.tools:
            if pinned.name == name:
                return pinned
        raise PatchsetError(f"tool {name} is not pinned in {LOCK_FILE.name}")

    @property
    def all_files(self) -> tuple[PinnedFile, ...]:
        return self.wheels + self.sources


def load_lock(path: Path = LOCK_FILE) -> Lock:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise PatchsetError(f"cannot read {path}: {err}") from err
    try:
        wheels = tuple(
            PinnedFile(d["name"], d["version"], d["file"], d["sha256"].lower(), "wheel")
            for d in data.get("dist", [])
        )
        sources = tuple(
            PinnedFile(
                d["name"],
                d["version"],
                d["file"],
                d["sha256"].lower(),
                "sdist",
                tuple(d.get("members", ())),
                d.get("tree_prefix", ""),
                tuple(d.get("directories", ())),
                tuple(d.get("exclude", ())),
            )
            for d in data.get("source", [])
        )
        tools = tuple(
            PinnedFile(d["name"], d["version"], d["file"], d["sha256"].lower(), "tool", registry=d["registry"])
            for d in data.get("tool", [])
        )
        return Lock(data["upstream"]["release"], data["upstream"]["commit"], wheels, sources, tools)
    except KeyError as err:
        raise PatchsetError(f"{path}: missing key {err}") from err


def local_version(path: Path = LOCK_FILE) -> str:
    """The local version label of a line (``[patchset] local_version`` of its ``upstream.lock``)."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise PatchsetError(f"cannot read {path}: {err}") from err
    label = data.get("patchset", {}).get("local_version", "ps.1")
    if not re.fullmatch(r"[a-z0-9]+(\.[a-z0-9]+)*", label):
        raise PatchsetError(f"invalid local version label {label!r} in {path}")
    return label


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_file(pinned: PinnedFile, path: Path) -> None:
    """Raise unless ``path`` has the pinned sha256."""
    actual = sha256_of(path)
    if actual != pinned.sha256:
        raise PatchsetError(
            f"hash mismatch for {pinned.file}: upstream.lock pins sha256 {pinned.sha256}, "
            f"the file at {path} has {actual}. Refusing to use it."
        )


#: Seconds to wait before the second and third attempt at a download. A registry's brief failure
#: (a reset connection, a 5xx) should not fail a build; a file that is not there fails all three.
DOWNLOAD_WAITS: tuple[float, ...] = (5.0, 20.0)


def download_with_retries(cmd: list[str], expected: Path, what: str) -> None:
    """Run ``cmd`` until it has put ``expected`` in place, up to ``1 + len(DOWNLOAD_WAITS)`` times;
    raise, with what the last attempt printed, if it never does."""
    waits = [*DOWNLOAD_WAITS, None]
    for attempt, wait in enumerate(waits, 1):
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if expected.exists():
            return
        if wait is None:
            said = (proc.stderr.strip() or proc.stdout.strip())[-2000:] or f"exit {proc.returncode}, no output"
            raise PatchsetError(f"could not download {what} ({attempt} attempts); the last one said:\n{said}")
        print(f"pstool: downloading {what} failed (attempt {attempt}); trying again in {wait:g}s", file=sys.stderr)
        time.sleep(wait)


def _download(pinned: PinnedFile, dest: Path) -> None:
    """``pip download`` one pinned file (the npm tarballs are the UI toolchain's: ``pstool.ui.fetch_tools``)."""
    if pinned.registry != "pypi":
        raise PatchsetError(f"{pinned.file} comes from the {pinned.registry} registry: pstool.ui.fetch_tools fetches it")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest)]
    if pinned.kind == "sdist":
        # pip prepares an sdist's metadata after downloading it; that needs its build backend,
        # which build isolation fetches from the index.
        cmd += ["--no-binary", ":all:"]
    else:
        cmd += ["--only-binary", ":all:"]
    cmd.append(pinned.requirement)
    # pip tries to build metadata for an sdist; it may fail after the download, which is fine: the
    # file being there is what counts.
    download_with_retries(cmd, dest / pinned.file, f"{pinned.file} ({pinned.requirement}) from the package index")


def fetch(lock: Lock | None = None, *, quiet: bool = False) -> dict[str, Path]:
    """Download every pinned file into the cache (once) and verify all of them."""
    lock = lock or load_lock()
    dest = cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    found: dict[str, Path] = {}
    for pinned in lock.all_files:
        path = dest / pinned.file
        if not path.exists():
            _download(pinned, dest)
        verify_file(pinned, path)
        found[pinned.file] = path
        if not quiet:
            print(f"ok  {pinned.file}  sha256={pinned.sha256[:16]}…")
    core = found[lock.wheel("apache-airflow-core").file]
    with zipfile.ZipFile(core) as zf:
        git_version = zf.read("airflow/git_version").decode().strip()
    # A release says ".release:<sha>", a pre-release build ".dev0+<sha>.dirty": the sha is the commit.
    if lock.commit not in re.findall(r"[0-9a-f]{40}", git_version):
        raise PatchsetError(
            f"airflow/git_version in the core wheel is {git_version!r}, upstream.lock says {lock.commit}"
        )
    return found
