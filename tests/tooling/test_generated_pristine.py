"""pstool.generated.check_pristine: its passed result is the machine's, keyed by what it reads.

The check runs the generators on the line's pristine upstream tree (no patch of the series) and
compares with upstream's files. Its inputs are the pins and the generator code, so a stamp in the
machine cache (the unpatched venvs' place) lets every checkout of the same pins skip it; a failing
check leaves no stamp, and a change to any input is a new key.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

from pstool import PatchsetError, generated, tree  # noqa: E402

pytestmark = pytest.mark.line_independent  # pstool's own mechanics, on the default line's pins


@pytest.fixture
def machine_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATCHSET_MACHINE_CACHE", str(tmp_path / "machine"))
    return tmp_path / "machine"


@pytest.fixture
def fake_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stand-ins for the slow parts (a scratch tree, the generators, pnpm codegen) that record each run."""
    runs: list[str] = []
    scratch = tmp_path / "scratch"

    def scratch_tree() -> Path:
        scratch.mkdir(exist_ok=True)
        runs.append("generators")
        return scratch

    monkeypatch.setattr(tree, "scratch_tree", scratch_tree)
    monkeypatch.setattr(generated, "run_generators", lambda *a, **k: None)
    monkeypatch.setattr("pstool.ui.codegen", lambda *a, **k: None)
    return runs


def test_a_passed_check_is_stamped_in_the_machine_cache_and_not_run_again(machine_cache: Path, fake_run, monkeypatch) -> None:
    monkeypatch.setattr(generated, "out", lambda *a, **k: "")  # git status: nothing differs
    first = generated.check_pristine()
    assert fake_run == ["generators"]
    assert "byte for byte" in first
    stamps = list((machine_cache / "checks").iterdir())
    assert [s.name for s in stamps] == [f"generators-reproduce-pristine-{generated._pristine_key()}"]
    again = generated.check_pristine()
    assert fake_run == ["generators"], "the stamped check ran again"
    assert "checked on this machine" in again
    generated.check_pristine(use_cache=False)
    assert fake_run == ["generators", "generators"]


def test_a_failed_check_leaves_no_stamp(machine_cache: Path, fake_run, monkeypatch) -> None:
    monkeypatch.setattr(generated, "out", lambda *a, **k: " M task-sdk/src/airflow/sdk/api/datamodels/_generated.py")
    with pytest.raises(PatchsetError, match="do not reproduce upstream's generated files"):
        generated.check_pristine()
    assert not (machine_cache / "checks").exists()
    with pytest.raises(PatchsetError):
        generated.check_pristine()
    assert fake_run == ["generators", "generators"]


def test_the_key_covers_the_generator_settings_and_the_constraints(monkeypatch, tmp_path: Path) -> None:
    key = generated._pristine_key()
    monkeypatch.setattr(generated, "generator_options", lambda: {"supervisor_typed_json_value": "changed"})
    assert generated._pristine_key() != key
    monkeypatch.undo()
    from pstool import venv

    other = tmp_path / "constraints.txt"
    other.write_bytes(venv.CONSTRAINTS.read_bytes() + b"# one more pin\n")
    monkeypatch.setattr(venv, "CONSTRAINTS", other)
    assert generated._pristine_key() != key
