"""The patch-dependencies check (``pstool.deps``): each patch's Depends names what its git am and its imports need.

A throwaway series where every feature's closure applies (so the per-feature apply passes), but
one patch's own ``Depends:`` leaves out what it needs: its context (``git am``), or a module or a
name another feature adds (an import, which ``git am`` alone never catches). ``pstool verify``
fails naming the patch and the feature it needs; naming it in the trailer makes verify pass.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.line_independent  # pstool itself, on the default line's pristine base

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))

from pstool.deps import added_imports, module_candidates

STATE = "airflow-core/src/airflow/utils/state.py"
SHARED = "shared/state/src/airflow_shared/state/__init__.py"
ALPHA_MODULE = "airflow-core/src/airflow/utils/alpha_marker.py"
STRINGS = "airflow-core/src/airflow/utils/strings.py"  # upstream's, without a module __getattr__
#: A new module as upstream's review checks want it (the ASF header, ruff-clean).
HEADER = (REPO / "dev" / "pstool" / "deps.py").read_text().split('"""', 1)[0]


def _module(body: str) -> str:
    return f'{HEADER}"""A module of the test series."""\n\nfrom __future__ import annotations\n\n{body}'


def _commit(pstool: Any, path: str, transform, subject: str, feature: str, depends: str) -> None:
    target = pstool.tree / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(transform(target.read_text() if target.exists() else ""))
    pstool.git("add", path)
    pstool.git(
        "commit", "-q", "-m",
        f"{subject}\n\nWhy it matters.\n\nFeature: {feature}\nUpstream-Status: Pending (test)\nDepends: {depends}\n",
    )


@pytest.fixture
def stacked(pstool: Any) -> Any:
    """alpha (a line in state.py, a new module, a name in strings.py); gamma 0001 (Depends: alpha) and 0002, which needs alpha."""
    pstool.run("checkout")
    _commit(pstool, STATE, lambda t: t.replace('    SCHEDULED = "scheduled"\n', '    SCHEDULED = "scheduled"\n    # alpha\n', 1),
            "Mark the states", "alpha", "none")
    _commit(pstool, ALPHA_MODULE, lambda t: _module("ALPHA = 1\n"), "Add the alpha marker", "alpha", "none")
    _commit(pstool, STRINGS, lambda t: t + "\n\nALPHA_WORD = 'alpha'\n", "Add the alpha word", "alpha", "none")
    _commit(pstool, SHARED, lambda t: t + "\n\nGAMMA = 1\n", "Add gamma", "gamma", "alpha")
    return pstool


def _dependency_failure(pstool: Any) -> str:
    pstool.run("export")
    proc = pstool.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1, proc.stdout
    # The feature-level closure applies: only the patch's own Depends is short.
    assert "gamma: applies alone with alpha" in proc.stdout
    return proc.stderr


def test_a_patch_whose_context_needs_an_undeclared_feature_fails_naming_both(stacked: Any) -> None:
    _commit(stacked, STATE, lambda t: t.replace("    # alpha\n", "    # alpha\n    # gamma\n", 1),
            "Mark gamma after alpha", "gamma", "none")
    err = _dependency_failure(stacked)
    assert "gamma/0002-mark-gamma-after-alpha.patch (Depends: none) does not apply with gamma" in err
    assert "it needs alpha, which its Depends must name" in err
    assert STATE in err  # git's own words: the file whose hunk does not apply


def test_an_import_of_a_module_another_feature_adds_fails_though_git_am_passes(stacked: Any) -> None:
    _commit(stacked, "airflow-core/src/airflow/utils/gamma_user.py",
            lambda t: _module("from airflow.utils.alpha_marker import ALPHA\n\nGAMMA_OF = ALPHA\n"),
            "Use the alpha marker", "gamma", "none")
    err = _dependency_failure(stacked)
    assert (
        "gamma/0002-use-the-alpha-marker.patch: airflow-core/src/airflow/utils/gamma_user.py:21 imports "
        "airflow.utils.alpha_marker, which alpha/0002-add-the-alpha-marker.patch adds (feature alpha): it needs alpha"
    ) in err, err


def test_an_import_of_a_name_another_feature_adds_fails(stacked: Any) -> None:
    """alpha adds ALPHA_WORD to a module of upstream's; the module exists without alpha, the name does not."""
    _commit(stacked, "airflow-core/src/airflow/utils/gamma_user.py",
            lambda t: _module("from airflow.utils.strings import ALPHA_WORD, to_boolean\n\nUSED = (ALPHA_WORD, to_boolean)\n"),
            "Use a word of alpha", "gamma", "none")
    err = _dependency_failure(stacked)
    assert (
        "gamma/0002-use-a-word-of-alpha.patch: airflow-core/src/airflow/utils/gamma_user.py:21 imports ALPHA_WORD "
        "from airflow.utils.strings, which alpha/0003-add-the-alpha-word.patch adds (feature alpha): it needs alpha"
    ) in err, err
    assert "to_boolean" not in err


def test_naming_the_feature_in_the_trailer_passes(stacked: Any) -> None:
    _commit(stacked, STATE, lambda t: t.replace("    # alpha\n", "    # alpha\n    # gamma\n", 1),
            "Mark gamma after alpha", "gamma", "alpha")
    stacked.run("export")
    out = stacked.run("verify", "--no-generated").stdout
    assert "patch dependencies: gamma: each of its 2 patch(es) applies, and its imports resolve" in out


def test_a_guarded_import_is_not_a_dependency(tmp_path: Path) -> None:
    """A provider that keeps working on an unpatched core imports the feature inside try/except ImportError."""
    path = "providers/celery/src/airflow/providers/celery/executors/x.py"
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_text(
        "try:\n    from airflow.models.gone import A\nexcept ImportError:\n    A = None\n"
        "from airflow.models.taskinstance import TaskInstance\n"
        "def f():\n    from .sibling import B\n"
    )
    found = added_imports(tmp_path, path, set(range(1, 8)))
    assert [(i.module, i.names) for i in found] == [
        ("airflow.models.taskinstance", ("TaskInstance",)),
        ("airflow.providers.celery.executors.sibling", ("B",)),
    ]
    assert module_candidates("airflow.providers.celery.executors.x", tmp_path) == [
        f"{path}", f"{path[:-3]}/__init__.py"
    ]
    assert module_candidates("airflow.sdk._shared.state", tmp_path)[0] == "shared/state/src/airflow_shared/state.py"
    assert module_candidates("requests", tmp_path) is None


def test_a_pending_entry_reports_the_patch_and_a_stale_one_fails(stacked: Any) -> None:
    _commit(stacked, STATE, lambda t: t.replace("    # alpha\n", "    # alpha\n    # gamma\n", 1),
            "Mark gamma after alpha", "gamma", "none")
    stacked.run("export")
    (stacked.root / "dev").mkdir()
    pending = stacked.root / "dev" / "verify-pending.toml"
    pending.write_text('[[depends]]\npatch = "gamma/0002-mark-gamma-after-alpha.patch"\nreason = "another change"\n')
    out = stacked.run("verify", "--no-generated").stdout
    assert "patch dependencies: pending in dev/verify-pending.toml" in out and "gamma/0002-mark-gamma-after-alpha.patch" in out

    pending.write_text('[[depends]]\npatch = "gamma/0001-add-gamma.patch"\nreason = "another change"\n')
    proc = stacked.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1
    assert "these [[depends]] entries' patches pass now (remove them): gamma/0001-add-gamma.patch" in proc.stderr
    assert "gamma/0002-mark-gamma-after-alpha.patch (Depends: none) does not apply" in proc.stderr
