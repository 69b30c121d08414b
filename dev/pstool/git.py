"""Thin wrappers around git with settings pinned for byte-stable output."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from pstool import PatchsetError

# Fixed identity and dates: the base commit hash is the same on every machine.
BASE_DATE = "2026-01-01T00:00:00+00:00"
IDENTITY = {
    "GIT_AUTHOR_NAME": "airflow-patchset",
    "GIT_AUTHOR_EMAIL": "patchset@localhost",
    "GIT_COMMITTER_NAME": "airflow-patchset",
    "GIT_COMMITTER_EMAIL": "patchset@localhost",
}
# Settings that change format-patch/apply output if a user has them set globally.
PINNED_CONFIG = [
    "-c", "core.autocrlf=false",
    "-c", "core.quotepath=true",
    "-c", "diff.noprefix=false",
    "-c", "diff.mnemonicPrefix=false",
    "-c", "diff.relative=false",
    "-c", "diff.algorithm=myers",
    "-c", "diff.renames=false",
    "-c", "diff.context=3",
    "-c", "diff.interHunkContext=0",
    "-c", "format.signature=",
    "-c", "format.coverLetter=false",
    "-c", "format.numbered=auto",
    "-c", "am.threeWay=false",
    "-c", "apply.whitespace=nowarn",
    "-c", "commit.gpgsign=false",
    "-c", "init.defaultBranch=main",
]


def git(
    cwd: Path,
    *args: str,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    full_env = {**os.environ, **IDENTITY, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    full_env.update(env or {})
    proc = subprocess.run(
        ["git", *PINNED_CONFIG, *args], cwd=cwd, input=input, capture_output=True, env=full_env
    )
    if check and proc.returncode != 0:
        raise PatchsetError(
            f"git {' '.join(args)} failed in {cwd}:\n{proc.stderr.decode(errors='replace')}"
            f"{proc.stdout.decode(errors='replace')[-2000:]}"
        )
    return proc


def out(cwd: Path, *args: str) -> str:
    return git(cwd, *args).stdout.decode().strip()


def strict_am(tree: Path, name: str, data: bytes, *, allow_offset: bool = False) -> list[str]:
    """Apply one format-patch with ``git am``: no 3-way, no fuzz and no offset allowed.

    ``git am`` itself tolerates hunks found at an offset, so every patch is first checked with
    ``git apply --check -v``, which reports such hunks; any offset or fuzz is an error.

    With ``allow_offset`` (a feature applied without the features the series puts before it in
    the same files), a hunk may sit at another line, but its context must still match exactly:
    fuzz and 3-way stay errors. Returns the offset lines git reported.
    """
    check = git(tree, "apply", "--check", "-v", "-", input=data, check=False)
    report = check.stderr.decode(errors="replace") + check.stdout.decode(errors="replace")
    if check.returncode != 0:
        raise PatchsetError(f"{name} does not apply:\n{report.strip()}")
    offsets = [ln for ln in report.splitlines() if "offset" in ln]
    bad = [ln for ln in report.splitlines() if "fuzz" in ln or ("offset" in ln and not allow_offset)]
    if bad:
        raise PatchsetError(f"{name} applies only with an offset or fuzz (strict apply refuses):\n" + "\n".join(bad))
    proc = git(tree, "am", "--keep-cr", "--no-3way", "--committer-date-is-author-date", input=data, check=False)
    if proc.returncode != 0:
        git(tree, "am", "--abort", check=False)
        raise PatchsetError(f"git am {name} failed:\n{proc.stderr.decode(errors='replace')}")
    return offsets
