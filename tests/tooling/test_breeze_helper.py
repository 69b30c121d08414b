"""dev/breeze/apply_series.py on a scratch checkout made from the pristine 3.3.2 base.

The real upstream history is not available here, so the scratch checkout's base commit stands in
for the release commit (``--base-commit``); everything else is the real helper, real git and a
series exported by the real ``pstool export-upstream``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.line_independent  # pstool itself, on the default line's pristine base

REPO = Path(__file__).resolve().parents[2]
HELPER = REPO / "dev" / "breeze" / "apply_series.py"
STATE = "shared/state/src/airflow_shared/state/__init__.py"
ENV_FILE = "files/airflow-breeze-config/variables.env"  # what Breeze's configure_environment.sh sources
STALE_ENV_FILE = "files/airflow-breeze-config/environment_variables.env"


@pytest.fixture
def checkout(seeded: Any) -> tuple[Any, Path, str]:
    """(pstool, a clean clone at the pristine base, that base's commit)."""
    fresh = seeded.root / "airflow"
    subprocess.run(["git", "clone", "-q", str(seeded.tree), str(fresh)], check=True)
    seeded.git("checkout", "-q", "-B", "aip", "refs/tags/upstream/3.3.2", cwd=fresh)
    base = seeded.git("rev-parse", "HEAD", cwd=fresh).strip()
    return seeded, fresh, base


def run_helper(pstool: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """The helper on the seeded series, which is built on the pstool fixture's line's (3.3) pristine base."""
    return subprocess.run(
        [sys.executable, str(HELPER), "--line", pstool.line, *args],
        check=False,
        env=pstool.env,
        capture_output=True,
        text=True,
    )


def head(pstool: Any, path: Path) -> str:
    return pstool.git("rev-parse", "HEAD", cwd=path).strip()


def test_check_accepts_a_clean_checkout_at_the_base(checkout: tuple[Any, Path, str]) -> None:
    pstool, fresh, base = checkout
    proc = run_helper(pstool, "--checkout", str(fresh), "--base-commit", base, "--check")
    assert proc.returncode == 0, proc.stderr
    assert "clean, at the series' base commit" in proc.stdout


def test_applies_the_exported_series_and_writes_the_breeze_settings(checkout: tuple[Any, Path, str]) -> None:
    pstool, fresh, base = checkout
    env_file = fresh / ENV_FILE
    env_file.parent.mkdir(parents=True)
    env_file.write_text("MY_OWN_SETTING=1\n")
    proc = run_helper(pstool, "--checkout", str(fresh), "--base-commit", base, "beta")
    assert proc.returncode == 0, proc.stderr
    log = pstool.git("log", "--format=%s", f"{base}..HEAD", cwd=fresh).splitlines()
    assert log == ["Add a marker to the shared state library", "Mark the callback states"]  # alpha, then beta
    assert "BETA_MARKER" in (fresh / STATE).read_text()
    settings = env_file.read_text()
    assert settings.startswith("MY_OWN_SETTING=1\n")
    assert "AIRFLOW__CORE__MAX_INFRA_RETRIES=1" in settings
    # Applying again (on a fresh branch) replaces the managed block instead of appending a second one.
    pstool.git("checkout", "-q", "-B", "again", base, cwd=fresh)
    assert run_helper(pstool, "--checkout", str(fresh), "--base-commit", base, "beta").returncode == 0
    assert env_file.read_text().count("AIRFLOW__CORE__MAX_INFRA_RETRIES=1") == 1


def test_refuses_a_dirty_checkout_and_changes_nothing(checkout: tuple[Any, Path, str]) -> None:
    pstool, fresh, base = checkout
    (fresh / STATE).write_text((fresh / STATE).read_text() + "\n# local edit\n")
    proc = run_helper(pstool, "--checkout", str(fresh), "--base-commit", base, "beta")
    assert proc.returncode == 1
    assert "uncommitted changes" in proc.stderr and STATE in proc.stderr
    assert head(pstool, fresh) == base
    assert not (fresh / ENV_FILE).exists()


def test_refuses_a_checkout_on_another_commit(checkout: tuple[Any, Path, str]) -> None:
    pstool, fresh, base = checkout
    (fresh / "NOTE.txt").write_text("x\n")
    pstool.git("add", "NOTE.txt", cwd=fresh)
    pstool.git("commit", "-q", "-m", "local work", cwd=fresh)
    moved = head(pstool, fresh)
    proc = run_helper(pstool, "--checkout", str(fresh), "--base-commit", base, "beta")
    assert proc.returncode == 1
    assert f"not at the series' base commit {base[:12]}" in proc.stderr
    assert f"checkout -b <feature> {base}" in proc.stderr
    assert head(pstool, fresh) == moved


def test_refuses_a_directory_that_is_not_a_git_checkout(tmp_path: Path, seeded: Any) -> None:
    proc = run_helper(seeded, "--checkout", str(tmp_path), "--check")
    assert proc.returncode == 1 and "is not a git work tree" in proc.stderr


def test_a_series_that_does_not_apply_leaves_the_checkout_at_the_base(
    checkout: tuple[Any, Path, str],
) -> None:
    pstool, fresh, base = checkout
    series = Path(pstool.run("export-upstream", "beta").stdout.strip())
    patch = min(series.glob("0002-*.patch"))
    lines = patch.read_text().splitlines(keepends=True)
    hunk = next(i for i, line in enumerate(lines) if line.startswith("@@ "))
    context = next(i for i in range(hunk + 1, len(lines)) if lines[i].startswith(" "))
    lines[context] = " a context line that is not in the file\n"  # the patch no longer matches the base
    patch.write_text("".join(lines))
    proc = run_helper(pstool, "--checkout", str(fresh), "--base-commit", base, "--series", str(series))
    assert proc.returncode == 1 and "git am failed" in proc.stderr
    assert head(pstool, fresh) == base
    assert pstool.git("status", "--porcelain", cwd=fresh).strip() == ""


def test_a_block_left_where_breeze_never_looks_is_removed(checkout: tuple[Any, Path, str]) -> None:
    """Earlier versions wrote environment_variables.env; Breeze sources variables.env only."""
    pstool, fresh, base = checkout
    stale = fresh / STALE_ENV_FILE
    stale.parent.mkdir(parents=True)
    helper = _helper_module()
    stale.write_text(f"MINE=1\n{helper.BEGIN}\nAIRFLOW__CORE__MAX_INFRA_RETRIES=1\n{helper.END}\n")
    assert run_helper(pstool, "--checkout", str(fresh), "--base-commit", base, "beta").returncode == 0
    assert stale.read_text() == "MINE=1\n"
    assert "AIRFLOW__CORE__MAX_INFRA_RETRIES=1" in (fresh / ENV_FILE).read_text()


def _helper_module() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("apply_series", HELPER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_features_example_dags_and_its_dependencies_go_to_the_breeze_dags_folder(tmp_path: Path) -> None:
    helper = _helper_module()
    copied = helper.copy_example_dags(tmp_path, ["aip-97", "aip-122"])
    target = tmp_path / "files" / "dags" / "airflow_patchset"
    assert (
        sorted(p.name for p in target.iterdir())
        == sorted(copied)
        == ["aip122_infra_retry.py", "aip97_failure_causes.py"]
    )
    # Applying another feature replaces them.
    copied = helper.copy_example_dags(tmp_path, ["asset-emit"])
    assert copied == sorted(p.name for p in target.iterdir())
    assert copied and all(name.startswith("asset_emit_") for name in copied)


def test_the_series_comes_from_the_34_line_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    helper = _helper_module()
    monkeypatch.delenv("PATCHSET_LINE", raising=False)
    assert helper.selected_line(None) == "3.4"
    assert helper.selected_line("3.3") == "3.3"
    monkeypatch.setenv("PATCHSET_LINE", "3.3")
    assert helper.selected_line(None) == "3.3"
