"""Container images: the stand-in for the official Airflow image, and the patched image.

``make base-image`` (``pstool base-image``) builds ``localhost/airflow-standin:<release>``: Debian
bookworm from ``debootstrap`` (the Debian mirror apt already uses), imported as a local image, with
Debian's Python and the official image's layout and entrypoint, and the line's *unpatched* pinned
wheels installed per user (``docker/standin/``, ``docs/image-standin.md``). It is cached by a key of
its inputs, kept as an image label: a second build with the same inputs only compares the key.

``make image`` (``pstool image``) builds ``airflow-patchset:<release>-<local version>`` from
``docker/Dockerfile`` on ``BASE`` (the official ``apache/airflow:<release>-python3.12`` by default,
where upstream publishes one) with the line's patched wheels (``pstool.paths.DIST_DIR``). The build
context is the repository root, cut down by ``.dockerignore``; ``docker/patchset.py`` compares each
patched distribution with the base's installed version inside the build (``docs/image.md``).

Either Docker or Podman builds: Docker when its engine answers ``docker info``, else Podman (which
``.ci/containers.sh`` installs). On these machines Podman needs the ``runc`` runtime (``crun`` fails:
"cgroups in hybrid mode not supported") and explicit ulimits within the machine's hard limits (its
defaults are above them: ``setrlimit ... Operation not permitted``); :class:`Engine` passes both on
every command, so nothing outside the repository needs configuring.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from pstool import PatchsetError
from pstool.lock import Lock, fetch, load_lock, sha256_of
from pstool.paths import LINE, ROOT, machine_cache_dir

DOCKER_DIR = ROOT / "docker"
DOCKERFILE = DOCKER_DIR / "Dockerfile"
STANDIN_DIR = DOCKER_DIR / "standin"
IMAGE_BUILD_DIR = ROOT / "build" / "image"  # shared by the lines: staged contexts

#: The official image's Python for the releases this repository pins (upstream's default).
OFFICIAL_PYTHON = "3.12"
OFFICIAL_REPOSITORY = "apache/airflow"
STANDIN_REPOSITORY = "localhost/airflow-standin"
PATCHED_REPOSITORY = "airflow-patchset"
OS_REPOSITORY = "localhost/airflow-standin-os"
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
KEY_LABEL = "org.airflow-patchset.inputs"
LABEL_PREFIX = "org.airflow-patchset."

#: What the machines allow (shared/reference/containers.md): the session's NOFILE hard limit and
#: conmon's NPROC hard limit; capped below by this process's own hard limits.
NOFILE = (1024, 20000)
NPROC = (4096, 32768)


# --------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------


def _ulimit(kind: int, wanted: tuple[int, int]) -> str:
    hard = resource.getrlimit(kind)[1]
    top = wanted[1] if hard == resource.RLIM_INFINITY else min(wanted[1], hard)
    return f"{min(wanted[0], top)}:{top}"


@dataclass(frozen=True)
class Engine:
    """The container engine that builds and runs here, with the flags this machine needs."""

    name: str  # "podman" or "docker"
    version: str

    @property
    def ulimits(self) -> list[str]:
        if self.name != "podman":
            return []
        return [
            "--ulimit",
            f"nofile={_ulimit(resource.RLIMIT_NOFILE, NOFILE)}",
            "--ulimit",
            f"nproc={_ulimit(resource.RLIMIT_NPROC, NPROC)}",
        ]

    def argv(self, *args: str) -> list[str]:
        """``podman --runtime runc ARGS`` (or ``docker ARGS``); ``build``/``run``/``create`` get the ulimits."""
        if self.name != "podman":
            return ["docker", *args]
        head = ["podman", "--runtime", "runc"]
        if args and args[0] == "build":
            # Docker's image format, as Docker builds it: OCI's has no SHELL (podman warns and ignores it).
            return [*head, "build", "--format", "docker", *self.ulimits, *args[1:]]
        if args and args[0] in ("run", "create"):
            return [*head, args[0], *self.ulimits, *args[1:]]
        return [*head, *args]

    def run(self, *args: str, check: bool = True, capture: bool = True, **kwargs) -> subprocess.CompletedProcess:
        """Run one engine command; with ``check``, a failure is a :class:`PatchsetError` with its output."""
        proc = subprocess.run(self.argv(*args), capture_output=capture, text=True, check=False, **kwargs)
        if check and proc.returncode != 0:
            output = f"\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}" if capture else ""
            raise PatchsetError(f"`{' '.join(self.argv(*args[:3]))} ...` failed ({proc.returncode}){output}")
        return proc

    def describe(self) -> str:
        extra = f" (runtime runc, ulimits {' '.join(self.ulimits[1::2])})" if self.name == "podman" else ""
        return f"{self.name} {self.version}{extra}"

    def inspect(self, ref: str) -> dict | None:
        proc = self.run("image", "inspect", ref, check=False)
        if proc.returncode != 0:
            return None
        data = json.loads(proc.stdout)
        return data[0] if data else None

    def labels(self, ref: str) -> dict[str, str] | None:
        """The image's labels; ``None`` when there is no such local image."""
        info = self.inspect(ref)
        if info is None:
            return None
        return dict((info.get("Config") or {}).get("Labels") or info.get("Labels") or {})

    def exists(self, ref: str) -> bool:
        return self.inspect(ref) is not None


def detect_engine() -> Engine:
    """Docker when its engine answers, else Podman; ``PATCHSET_CONTAINER_ENGINE`` forces one."""
    forced = os.environ.get("PATCHSET_CONTAINER_ENGINE", "")
    candidates = [forced] if forced else ["docker", "podman"]
    for name in candidates:
        if name not in ("docker", "podman"):
            raise PatchsetError(f"PATCHSET_CONTAINER_ENGINE={name!r}: docker or podman")
        if shutil.which(name) is None:
            continue
        if name == "docker":
            proc = subprocess.run(
                ["docker", "info", "--format", "{{.ServerVersion}}"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        else:
            proc = subprocess.run(
                ["podman", "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True, check=False
            )
        if proc.returncode == 0 and proc.stdout.strip():
            return Engine(name, proc.stdout.strip().splitlines()[-1])
    raise PatchsetError(
        "no container engine works here: `docker info` fails (no Docker engine) and podman is not installed. "
        "Run `bash .ci/containers.sh image` (as root: installs Debian's podman and runc), "
        "which `make image` does."
    )


def pip_ca_bundle() -> Path | None:
    """The CA bundle the host's pip is configured with (``PIP_CERT`` or pip's ``global.cert``), if any.

    Builds pass it as the build secret ``pip-ca``, so that pip in the build trusts what the host's pip
    trusts (here: a TLS-inspecting proxy's certificate). It never enters an image layer.
    """
    candidates = [os.environ.get("PIP_CERT", "")]
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.cert"], capture_output=True, text=True, check=False
    )
    candidates.append(proc.stdout.strip() if proc.returncode == 0 else "")
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def build_secrets() -> list[str]:
    bundle = pip_ca_bundle()
    return ["--secret", f"id=pip-ca,src={bundle}"] if bundle else []


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """One image build at a time on this machine.

    The engine's image store is the machine's, shared by every checkout: CI's two clones (one per
    line) build their stand-ins from the one OS image in it, so a lock of one clone would let both
    debootstrap and import that image at once.
    """
    cache = machine_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "image-build.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


# --------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------


def local_version_label() -> str:
    from pstool.build import local_version

    return local_version()


def standin_tag(release: str) -> str:
    return f"{STANDIN_REPOSITORY}:{release}"


def patched_tag(release: str, label: str) -> str:
    """``airflow-patchset:3.3.2-ps.1``: the upstream release and the patch set's local version label."""
    return f"{PATCHED_REPOSITORY}:{release}-{label}"


def official_base(release: str) -> str | None:
    """The official image of a release, or ``None`` where upstream publishes none.

    Upstream publishes ``apache/airflow:<version>-python<X.Y>`` for release candidates and final
    releases only (its release guide: "only when there is an RC candidate or final version"), not for
    alphas or betas such as 3.4.0b2.
    """
    if re.fullmatch(r"\d+\.\d+\.\d+(rc\d+)?", release):
        return f"{OFFICIAL_REPOSITORY}:{release}-python{OFFICIAL_PYTHON}"
    return None


def _qualified(ref: str) -> str:
    """Podman resolves no short names here: ``apache/airflow:x`` is Docker Hub's."""
    first = ref.split("/", 1)[0]
    if "/" in ref and ("." in first or ":" in first or first == "localhost"):
        return ref
    return f"docker.io/{ref}" if "/" in ref else f"docker.io/library/{ref}"


# --------------------------------------------------------------------------------------------
# The stand-in base
# --------------------------------------------------------------------------------------------


def _apt_sources() -> list[tuple[str, list[str]]]:
    """(URI, suites) of every Debian source apt is configured with (one-line and deb822 formats)."""
    found: list[tuple[str, list[str]]] = []
    apt = Path("/etc/apt")
    for path in [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]:
        if path.is_file():
            for line in path.read_text(errors="replace").splitlines():
                words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
                if len(words) >= 3 and words[0] == "deb":
                    found.append((words[1], [words[2]]))
    for path in sorted((apt / "sources.list.d").glob("*.sources")):
        for block in re.split(r"\n\s*\n", path.read_text(errors="replace")):
            fields: dict[str, str] = {}
            for line in block.splitlines():
                if line.startswith("#") or ":" not in line:
                    continue
                key, value = line.split(":", 1)
                fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
                for uri in fields.get("uris", "").split():
                    found.append((uri, fields.get("suites", "").split()))
    return found


def debian_mirrors() -> tuple[str, str | None]:
    """The Debian mirror (and security mirror) apt already uses for bookworm, else deb.debian.org."""
    main = security = None
    for uri, suites in _apt_sources():
        if SUITE in suites and main is None and "security" not in uri:
            main = uri.rstrip("/")
        if f"{SUITE}-security" in suites and security is None:
            security = uri.rstrip("/")
    return main or DEFAULT_MIRROR, security


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def os_image(engine: Engine, *, refresh: bool = False) -> str:
    """The debootstrapped bookworm root filesystem as a local image (built once, then reused)."""
    mirror, security = debian_mirrors()
    key = _key("minbase", SUITE, mirror, security)
    tag = f"{OS_REPOSITORY}:{SUITE}"
    if not refresh and (engine.labels(tag) or {}).get(KEY_LABEL) == key:
        return tag
    if shutil.which("debootstrap") is None:
        raise PatchsetError("debootstrap is not installed; run `bash .ci/containers.sh base-image` (make base-image does)")
    started = time.monotonic()
    print(f"base-image: debootstrap --variant=minbase {SUITE} from {mirror} ...", flush=True)
    IMAGE_BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=IMAGE_BUILD_DIR, prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", SUITE, str(rootfs), mirror], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise PatchsetError(f"debootstrap failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        sources = [f"deb {mirror} {SUITE} main", f"deb {mirror} {SUITE}-updates main"]
        if security:
            sources.append(f"deb {security} {SUITE}-security main")
        (rootfs / "etc" / "apt" / "sources.list").write_text("\n".join(sources) + "\n")
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        (rootfs / "var" / "cache" / "apt" / "archives" / "partial").mkdir(parents=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            engine.argv("import", "--change", f"LABEL {KEY_LABEL}={key}", "-", tag),
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            check=False,
        )
        tar.stdout.close()
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise PatchsetError(f"importing the root filesystem failed:\n{imported.stderr[-3000:]}")
    print(f"base-image: {tag} imported ({time.monotonic() - started:.0f}s)", flush=True)
    return tag


def _constraints() -> Path:
    from pstool.venv import CONSTRAINTS

    return CONSTRAINTS


PYTHON_PINS = STANDIN_DIR / "python-3.11.2-pins.txt"


def standin_constraints() -> str:
    """The line's constraints with the stand-in's Python pins (``docker/standin/python-3.11.2-pins.txt``)."""

    def name(line: str) -> str:
        return re.split(r"[=<>!~ ;\[]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")

    overrides = [
        line.split("#", 1)[0].strip() for line in PYTHON_PINS.read_text().splitlines() if line.split("#", 1)[0].strip()
    ]
    replaced = {name(line) for line in overrides}
    kept = [
        line
        for line in _constraints().read_text().splitlines()
        if not (line.strip() and not line.startswith("#") and name(line) in replaced)
    ]
    header = f"# {_constraints().relative_to(ROOT)} with {PYTHON_PINS.relative_to(ROOT)} (pstool base-image)"
    return "\n".join([header, *kept, *overrides]) + "\n"


def standin_inputs(lock: Lock) -> dict[str, object]:
    """Everything the stand-in is built from; its hash is the cache key."""
    return {
        "release": lock.release,
        "wheels": sorted((w.file, w.sha256) for w in lock.wheels),
        "constraints": hashlib.sha256(standin_constraints().encode()).hexdigest(),
        "recipe": sorted((p.name, sha256_of(p)) for p in STANDIN_DIR.iterdir() if p.is_file()),
    }


def _build(engine: Engine, args: list[str], *, quiet: bool, what: str) -> None:
    """``build ARGS``: its output streams through, or with ``quiet`` is shown only if it fails."""
    proc = engine.run("build", *args, capture=quiet, check=False)
    if proc.returncode != 0:
        tail = f":\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}" if quiet else "; its output is above"
        raise PatchsetError(f"building {what} failed (exit {proc.returncode}){tail}")


def base_image(*, refresh: bool = False, engine: Engine | None = None, quiet: bool = False) -> str:
    """Build ``localhost/airflow-standin:<release>`` unless an image of the same inputs exists."""
    lock = load_lock()
    tag = standin_tag(lock.release)
    with build_lock():
        engine = engine or detect_engine()
        os_tag = os_image(engine, refresh=refresh)
        os_id = (engine.inspect(os_tag) or {}).get("Id", "")
        inputs = standin_inputs(lock)
        key = _key(inputs, os_id)
        if not refresh and (engine.labels(tag) or {}).get(KEY_LABEL) == key:
            print(f"base-image: {tag} is up to date (inputs {key})")
            return tag
        files = fetch(lock, quiet=True)
        context = IMAGE_BUILD_DIR / f"standin-{lock.release}"
        shutil.rmtree(context, ignore_errors=True)
        (context / "wheels").mkdir(parents=True)
        for name in ("Containerfile", "entrypoint"):
            shutil.copy2(STANDIN_DIR / name, context / name)
        for pinned in lock.wheels:
            os.link(files[pinned.file], context / "wheels" / pinned.file)
        (context / "constraints.txt").write_text(standin_constraints())
        print(f"base-image: building {tag} with {engine.describe()} ...", flush=True)
        started = time.monotonic()
        _build(
            engine,
            [
                "--network=host",
                "--file",
                str(context / "Containerfile"),
                *build_secrets(),
                "--build-arg",
                f"OS_IMAGE={os_tag}",
                "--build-arg",
                f"STANDIN_INPUTS={_key(inputs['wheels'], inputs['constraints'])}",
                "--build-arg",
                f"AIRFLOW_VERSION={lock.release}",
                "--label",
                f"{KEY_LABEL}={key}",
                "--label",
                f"{LABEL_PREFIX}standin-of={official_base(lock.release) or 'apache/airflow ' + lock.release}",
                "--label",
                f"{LABEL_PREFIX}release={lock.release}",
                "--tag",
                tag,
                str(context),
            ],
            quiet=quiet,
            what=tag,
        )
        shutil.rmtree(context, ignore_errors=True)
        print(f"base-image: built {tag} ({time.monotonic() - started:.0f}s)")
        return tag


# --------------------------------------------------------------------------------------------
# The patched image
# --------------------------------------------------------------------------------------------


def installer() -> ModuleType:
    """``docker/patchset.py``, the install step that runs inside the image build, as a module."""
    spec = importlib.util.spec_from_file_location("airflow_patchset_installer", DOCKER_DIR / "patchset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheel_metadata(path: Path) -> tuple[str, str]:
    """(name, version) from a wheel's METADATA: the installer's own reading."""
    return installer().wheel_metadata(path)


def patched_wheels(lock: Lock, label: str) -> list[Path]:
    """The line's patched wheels in its dist directory, each checked against the line's lock."""
    from pstool.build import dist_dir

    dist = dist_dir()
    wheels = sorted(dist.glob("*.whl"))
    if not wheels:
        raise PatchsetError(f"no patched wheels in {dist}; run `make wheels LINE={LINE}` (make image does)")
    for path in wheels:
        name, version = _wheel_metadata(path)
        pinned = lock.wheel(name)
        if version != f"{pinned.version}+{label}":
            raise PatchsetError(
                f"{path} is {name} {version}, but the {LINE} line pins {pinned.version} with the label {label} "
                f"({pinned.version}+{label}); rebuild the wheels with `make wheels LINE={LINE}`"
            )
    return wheels


def resolve_base(engine: Engine | None, base: str | None, release: str) -> str:
    """The base image to build on, present locally (pulled if need be), or a clear refusal."""
    if base is None:
        base = official_base(release)
        if base is None:
            raise PatchsetError(
                f"the {LINE} line pins Airflow {release}, for which upstream publishes no official image "
                "(apache/airflow images exist for release candidates and final releases only). "
                f"Build the stand-in and use it: `make base-image LINE={LINE} && "
                f"make image LINE={LINE} BASE={standin_tag(release)}`, or pass BASE=<an image with Airflow {release}>."
            )
    assert engine is not None
    if engine.exists(base):
        return base
    pull = _qualified(base) if engine.name == "podman" else base
    if engine.exists(pull):
        return pull
    print(f"image: {base} is not here; pulling it ...", flush=True)
    proc = engine.run("pull", pull, check=False)
    if proc.returncode != 0:
        hint = (
            f"; here, build the stand-in and use it: `make base-image LINE={LINE} && make image LINE={LINE} "
            f"BASE={standin_tag(release)}`"
        )
        raise PatchsetError(
            f"the base image {base} is not present and cannot be pulled ({(proc.stderr or proc.stdout).strip()[-400:]})"
            + hint
        )
    return pull


def image_identity(label: str) -> dict[str, str]:
    """What names the image's patch set: the label, the repository commit and the line's series hash
    (``pstool.releases``); ``airflow-patchset check`` prints them inside the image."""
    from pstool.paths import PATCHES_DIR
    from pstool.releases import commit_of, series_hash

    return {"label": label, "commit": commit_of(), "series_hash": series_hash(PATCHES_DIR), "line": LINE}


#: identity key -> the Dockerfile's build argument (it writes them to ~/patchset-release.json and labels).
IDENTITY_ARGS = {
    "label": "PATCHSET_LABEL",
    "commit": "PATCHSET_COMMIT",
    "series_hash": "PATCHSET_SERIES_HASH",
    "line": "PATCHSET_LINE",
}


def identity_build_args(identity: dict[str, str]) -> list[str]:
    args: list[str] = []
    for key, arg in IDENTITY_ARGS.items():
        args += ["--build-arg", f"{arg}={identity[key]}"]
    return args


def image(
    *,
    base: str | None = None,
    provider_changes: str = "",
    engine: Engine | None = None,
    tag: str | None = None,
    build_wheels: bool = True,
    quiet: bool = False,
) -> str:
    """Build the patched image on ``base``; return its tag.

    With ``build_wheels`` the patched wheels are built first (as ``make install`` does: the tree is
    checked out if missing and must match the series); without, those in the dist directory are used.
    """
    from pstool.build import build, dist_dir
    from pstool.venv import ensure_tree

    lock = load_lock()
    label = local_version_label()
    allowed = {c for c in provider_changes.replace(" ", "").split(",") if c}
    if allowed - {"upgrade", "downgrade"}:
        raise PatchsetError(f"PROVIDER_CHANGES={provider_changes!r}: upgrade, downgrade or both (comma separated)")
    if base is None and official_base(lock.release) is None:
        resolve_base(None, None, lock.release)  # refuses before anything is built
    if build_wheels:
        build(ensure_tree(None), lock, dist_dir())
    wheels = patched_wheels(lock, label)
    try:
        wheels_rel = dist_dir().resolve().relative_to(ROOT)
    except ValueError:
        raise PatchsetError(f"the patched wheels ({dist_dir()}) must be inside the repository: it is the build context") from None
    tag = tag or patched_tag(lock.release, label)
    identity = image_identity(label)
    with build_lock():
        engine = engine or detect_engine()
        base_ref = resolve_base(engine, base, lock.release)
        print(f"image: building {tag} on {base_ref} from {wheels_rel}/ with {engine.describe()}", flush=True)
        started = time.monotonic()
        _build(
            engine,
            [
                "--network=host",
                "--file",
                str(DOCKERFILE),
                *build_secrets(),
                "--build-arg",
                f"BASE={base_ref}",
                "--build-arg",
                f"WHEELS={wheels_rel}",
                "--build-arg",
                f"PATCHSET_PROVIDER_CHANGES={','.join(sorted(allowed))}",
                "--label",
                f"{LABEL_PREFIX}release={lock.release}",
                "--label",
                f"{LABEL_PREFIX}local-version={label}",
                "--label",
                f"{LABEL_PREFIX}line={LINE}",
                "--label",
                f"{LABEL_PREFIX}wheels={','.join(p.name for p in wheels)}",
                *identity_build_args(identity),
                "--tag",
                tag,
                str(ROOT),
            ],
            quiet=quiet,
            what=f"{tag} on {base_ref}",
        )
    print(f"image: built {tag} on {base_ref} with {engine.name} ({time.monotonic() - started:.0f}s)")
    return tag
