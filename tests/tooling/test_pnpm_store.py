"""pstool.ui: the pnpm store is the machine's download cache; each checkout still fetches its lockfile.

With the real pinned Node and pnpm and a one-package project: a first checkout fetches from the
registry into the store; a second checkout, whose registry cannot be reached, fetches the same
lockfile from the store alone; a checkout whose store is empty cannot (so the second one's fetch
really came from the store, not from the network).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.line_independent  # pstool's own mechanics, the same for every line

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

from pstool import PatchsetError, ui

#: Nothing listens here: a registry that cannot be reached.
NO_REGISTRY = "http://127.0.0.1:9/"


@pytest.fixture(scope="module")
def toolchain() -> ui.Toolchain:
    """The line's pinned Node and pnpm, as the UI build uses them (fetched if this clone has not yet)."""
    return ui.toolchain()


@pytest.fixture
def project(tmp_path: Path, toolchain: ui.Toolchain) -> Path:
    """A project of one small package and its frozen lockfile (resolved against the real registry)."""
    proj = tmp_path / "project"
    proj.mkdir()
    (proj / "package.json").write_text(
        json.dumps({"name": "store-test", "version": "1.0.0", "private": True, "dependencies": {"is-number": "7.0.0"}})
    )
    subprocess.run(
        toolchain.pnpm("install", "--lockfile-only"), cwd=proj, env=toolchain.env(), check=True, capture_output=True,
        timeout=300,
    )
    assert (proj / "pnpm-lock.yaml").is_file()
    return proj


def checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, store: Path, *, registry: str | None = None) -> Path:
    """Act as the checkout ``name`` (its own UI cache) on the store ``store``; return its UI cache."""
    cache = tmp_path / name
    monkeypatch.setenv("PATCHSET_UI_CACHE", str(cache))
    monkeypatch.setenv("PATCHSET_PNPM_STORE", str(store))
    if registry:
        monkeypatch.setenv("npm_config_registry", registry)
        monkeypatch.setenv("npm_config_fetch_retries", "0")  # pnpm's retries would wait a minute
    else:
        monkeypatch.delenv("npm_config_registry", raising=False)
        monkeypatch.delenv("npm_config_fetch_retries", raising=False)
    return cache


def test_the_store_defaults_to_the_machine_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PATCHSET_PNPM_STORE", raising=False)
    monkeypatch.setenv("PATCHSET_MACHINE_CACHE", str(tmp_path / "machine"))
    assert ui.pnpm_store() == tmp_path / "machine" / "pnpm-store"
    env = ui.Toolchain(Path("/n/bin"), Path("/p/pnpm.cjs")).env()
    assert env["npm_config_store_dir"] == str(tmp_path / "machine" / "pnpm-store")
    assert not env["npm_config_cache_dir"].startswith(str(REPO))


def test_a_second_checkout_fetches_from_the_store_without_the_registry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, toolchain: ui.Toolchain, project: Path
) -> None:
    monkeypatch.setattr(ui, "DOWNLOAD_WAITS", ())  # no retries: a failure fails at once
    store = tmp_path / "store"
    first = checkout(monkeypatch, tmp_path, "clone-a", store)
    ui.ensure_store(toolchain, project)
    assert list(first.glob(".fetched-*")), "the first checkout wrote no stamp"
    assert store.is_dir() and any(store.rglob("*")), "nothing was fetched into the store"

    # The stamp is the checkout's: a second checkout fetches again, and the store has every package.
    second = checkout(monkeypatch, tmp_path, "clone-b", store, registry=NO_REGISTRY)
    assert not list(second.glob(".fetched-*"))
    ui.ensure_store(toolchain, project)
    assert list(second.glob(".fetched-*"))

    # The control: without the store's packages, the same fetch needs the registry, and fails.
    third = checkout(monkeypatch, tmp_path, "clone-c", tmp_path / "empty-store", registry=NO_REGISTRY)
    with pytest.raises(PatchsetError, match="pnpm fetch"):
        ui.ensure_store(toolchain, project)
    assert not list(third.glob(".fetched-*")), "a failed fetch left a stamp"


def test_a_checkout_whose_store_changes_fetches_into_the_new_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, toolchain: ui.Toolchain, project: Path
) -> None:
    """The checkout's stamp is a claim about one store: the same checkout on another store (a test's
    own machine cache, say) fetches again, so its ``install --offline`` finds every package.

    The landing CI of dacfa99 failed so: the UI lint tests ran with a machine cache of their own, the
    checkout's stamp said the lockfile was fetched, and ``pnpm install --offline`` found an empty store.
    """
    monkeypatch.setattr(ui, "DOWNLOAD_WAITS", ())
    checkout(monkeypatch, tmp_path, "clone-a", tmp_path / "store")
    ui.ensure_store(toolchain, project)

    moved = tmp_path / "other-store"
    checkout(monkeypatch, tmp_path, "clone-a", moved)
    ui.ensure_store(toolchain, project)
    assert moved.is_dir() and any(moved.rglob("*")), "the checkout did not fetch into its new store"
    ui.install_deps(toolchain, project)  # pnpm install --offline: every package must be in the new store
    assert (project / "node_modules" / "is-number" / "package.json").is_file()
