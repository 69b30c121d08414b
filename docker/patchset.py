#!/usr/bin/env python3
"""Install the patch set's wheels into an Airflow image, and check an image still carries them.

Runs inside the image (``docker/Dockerfile`` installs it as ``/usr/local/bin/airflow-patchset``),
with the base image's Python and pip; standard library only.

``airflow-patchset install --wheels DIR [--allow upgrade,downgrade] --constraints-out FILE``
    For each patched wheel in DIR, compare its version with the distribution the base has
    installed. Airflow core and the Task SDK must be the same upstream version (the patches are for
    that release). A provider of another version (or missing) is refused, naming both versions,
    unless ``--allow`` names the change: ``upgrade`` (the base's is older or missing) or
    ``downgrade`` (the base's is newer). Then install the wheels with every other distribution
    pinned to the version the base has installed, so that pip adds what an allowed provider change
    needs but never up- or downgrades anything else; check that nothing else changed; ``pip check``;
    and write FILE, the constraints that pin the patched ``+ps.N`` versions.

``airflow-patchset identify --label L --commit C --series-hash H --line X --out FILE``
    Write FILE (``~/patchset-release.json``): what names the image's patch set, its local version
    label (``ps.N``), the repository commit and the line's series hash (``docker/Dockerfile``).

``airflow-patchset check [--constraints FILE] [--release FILE]``
    Print the image's label, commit and series hash (``~/patchset-release.json``); exit 1, naming
    each one, when a distribution the patch set pins is no longer installed at its patched version
    (e.g. a later ``pip install`` replaced it with upstream's); else print them.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

#: Not providers: the patches are for exactly this release of them; no option installs another.
CORE_DISTRIBUTIONS = {"apache-airflow-core", "apache-airflow-task-sdk", "apache-airflow"}
DEFAULT_CONSTRAINTS = Path(os.environ.get("AIRFLOW_USER_HOME_DIR", "/home/airflow")) / "patchset-constraints.txt"
DEFAULT_RELEASE = DEFAULT_CONSTRAINTS.parent / "patchset-release.json"
IDENTITY_KEYS = ("label", "commit", "series_hash", "line")


def canonical(name: str) -> str:
    """PEP 503 normalized name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def public(version: str) -> str:
    """The version without its local label: ``3.26.0+ps.1`` -> ``3.26.0``."""
    return version.split("+", 1)[0]


def version_key(version: str):
    """A sortable key of a PEP 440 version (``packaging`` is an Airflow dependency; pip vendors it)."""
    try:
        from packaging.version import Version
    except ImportError:  # pragma: no cover - an Airflow image always has packaging
        from pip._vendor.packaging.version import Version
    return Version(version)


def installed() -> dict[str, tuple[str, str]]:
    """{canonical name: (name, version)} of every distribution this interpreter sees."""
    found: dict[str, tuple[str, str]] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonical(name), (name, dist.version))
    return found


def wheel_metadata(path: Path) -> tuple[str, str]:
    with zipfile.ZipFile(path) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    fields = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the description follows the headers
        if ": " in line:
            key, value = line.split(": ", 1)
            fields.setdefault(key, value)
    return fields["Name"], fields["Version"]


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def plan(wheels: list[Path], base: dict[str, tuple[str, str]], allowed: set[str]) -> tuple[list[dict], list[str]]:
    """What to do with each wheel, and the refusals (each naming both versions)."""
    steps, refusals = [], []
    for path in wheels:
        name, version = wheel_metadata(path)
        key = canonical(name)
        base_version = base.get(key, (name, None))[1]
        step = {"name": name, "wheel": str(path), "patched": version, "base": base_version}
        if base_version is not None and public(base_version) == public(version):
            step["change"] = "same upstream version"
        elif key in CORE_DISTRIBUTIONS:
            refusals.append(
                f"{name}: the base image has {base_version or 'none installed'}, the patch set's is {version}. "
                f"The patches are for {public(version)}: build on an image of that release (BASE=...)."
            )
            continue
        else:
            change = (
                "upgrade"
                if base_version is None or version_key(public(base_version)) < version_key(public(version))
                else "downgrade"
            )
            step["change"] = change
            if change not in allowed:
                had = f"has {base_version}" if base_version else "does not have it"
                refusals.append(
                    f"{name}: the base image {had}, the patch set's is {version} (a provider {change}). "
                    "A patched provider never replaces another version silently: pass "
                    f"--build-arg PATCHSET_PROVIDER_CHANGES={change} (make image PROVIDER_CHANGES={change}) to "
                    "install it with its dependencies resolved against the base's installed set, or build on "
                    f"a base whose {name} is {public(version)}."
                )
                continue
        steps.append(step)
    return steps, refusals


def install(args: argparse.Namespace) -> int:
    wheels = sorted(Path(args.wheels).glob("*.whl"))
    if not wheels:
        print(f"airflow-patchset: no wheels in {args.wheels}", file=sys.stderr)
        return 2
    allowed = {c.strip() for c in args.allow.split(",") if c.strip()}
    if allowed - {"upgrade", "downgrade"}:
        print(f"airflow-patchset: --allow {args.allow!r}: upgrade, downgrade or both", file=sys.stderr)
        return 2
    before = installed()
    if "apache-airflow-core" not in before:
        print("airflow-patchset: the base image has no apache-airflow-core: not an Airflow image", file=sys.stderr)
        return 2
    steps, refusals = plan(wheels, before, allowed)
    for step in steps:
        print(f"airflow-patchset: {step['name']}: base {step['base']} -> {step['patched']} ({step['change']})")
    sys.stdout.flush()
    if refusals:
        print("\nairflow-patchset: refusing to build:", file=sys.stderr)
        for line in refusals:
            print(f"  {line}", file=sys.stderr)
        return 1
    patched = {canonical(s["name"]) for s in steps}
    with tempfile.TemporaryDirectory() as tmp:
        pins = Path(tmp) / "base-installed.txt"
        pins.write_text(
            "".join(f"{name}=={version}\n" for key, (name, version) in sorted(before.items()) if key not in patched)
        )
        # Every other distribution stays at the version the base has; pip may add missing ones.
        pip("install", "--progress-bar", "off", "--constraint", str(pins), *(s["wheel"] for s in steps))
        # A wheel whose exact version is installed already (an image built on a patched image) is
        # reinstalled from these bytes.
        same = [s["wheel"] for s in steps if s["base"] == s["patched"]]
        if same:
            pip("install", "--progress-bar", "off", "--no-deps", "--force-reinstall", *same)
    after = installed()
    changed = [
        f"{name} {version} -> {after[key][1] if key in after else 'removed'}"
        for key, (name, version) in sorted(before.items())
        if key not in patched and after.get(key, (None, None))[1] != version
    ]
    wrong = [
        f"{s['name']} is {after.get(canonical(s['name']), (None, 'not installed'))[1]}, not {s['patched']}"
        for s in steps
        if after.get(canonical(s["name"]), (None, None))[1] != s["patched"]
    ]
    if changed or wrong:
        print("airflow-patchset: the install changed what it must not:", *changed, *wrong, sep="\n  ", file=sys.stderr)
        return 1
    added = sorted(f"{name} {version}" for key, (name, version) in after.items() if key not in before)
    if added:
        print("airflow-patchset: added for the changed providers: " + ", ".join(added))
    pip("check")
    lines = [
        "# The patch set's distributions in this image, at their patched versions (airflow-patchset install).",
        "# Pass it to every later pip install (`pip install --constraint ~/patchset-constraints.txt ...`)",
        "# so that pip refuses, instead of silently replacing them with upstream's; `airflow-patchset check`",
        "# verifies they are still installed.",
        *(f"{s['name']}=={s['patched']}" for s in steps),
    ]
    Path(args.constraints_out).write_text("\n".join(lines) + "\n")
    summary = {s["name"]: {"base": s["base"], "patched": s["patched"], "change": s["change"]} for s in steps}
    print("airflow-patchset: installed " + json.dumps(summary, sort_keys=True))
    return 0


def identify(args: argparse.Namespace) -> int:
    identity = {key: getattr(args, key) for key in IDENTITY_KEYS}
    Path(args.out).write_text(json.dumps(identity, indent=2, sort_keys=True) + "\n")
    print("airflow-patchset: " + describe(identity))
    return 0


def describe(identity: dict) -> str:
    """``patch set ps.2 (line 3.3), commit <sha>, series <sha256>``."""
    return (
        f"patch set {identity.get('label', 'unknown')} (line {identity.get('line', 'unknown')}), "
        f"commit {identity.get('commit', 'unknown')}, series {identity.get('series_hash', 'unknown')}"
    )


def read_identity(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def check(args: argparse.Namespace) -> int:
    identity = read_identity(Path(args.release))
    if identity is None:
        print(f"airflow-patchset: {args.release} is missing: the image does not say which release it is")
    else:
        print(describe(identity))
    path = Path(args.constraints)
    if not path.is_file():
        print(f"airflow-patchset: {path} is missing: not a patched image?", file=sys.stderr)
        return 2
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==", 1)
            pins[canonical(name)] = (name, version)
    now = installed()
    lost = [
        f"{name}: {now[key][1] if key in now else 'not installed'} (the patch set's is {version})"
        for key, (name, version) in sorted(pins.items())
        if now.get(key, (None, None))[1] != version
    ]
    if lost:
        print("airflow-patchset: this image lost patched distributions:", *lost, sep="\n  ", file=sys.stderr)
        print(
            "Build the layer that replaced them with `pip install --constraint ~/patchset-constraints.txt ...` "
            "(pip then refuses to replace them), or reinstall them: "
            "`pip install --no-deps --force-reinstall ~/patchset-wheels/*.whl`.",
            file=sys.stderr,
        )
        return 1
    for name, version in sorted(pins.values()):
        print(f"ok  {name}=={version}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="airflow-patchset", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("install", help="install the patched wheels over the base image's Airflow")
    p.add_argument("--wheels", required=True, help="directory of the patched wheels")
    p.add_argument("--allow", default="", help="provider version changes to allow: upgrade, downgrade")
    p.add_argument("--constraints-out", required=True, help="where to write the patched versions' constraints")
    p = sub.add_parser("check", help="print the image's release; verify it still carries every patched distribution")
    p.add_argument("--constraints", default=str(DEFAULT_CONSTRAINTS))
    p.add_argument("--release", default=str(DEFAULT_RELEASE))
    p = sub.add_parser("identify", help="record the image's label, commit and series hash")
    for key in IDENTITY_KEYS:
        p.add_argument(f"--{key.replace('_', '-')}", required=True)
    p.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    return {"install": install, "check": check, "identify": identify}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
