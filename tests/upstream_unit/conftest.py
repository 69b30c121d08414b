"""
Run the upstream-style unit tests that the series adds to the line's tree (``build/<line>/tree``) (``*/tests/**``).

The patches carry their unit tests at upstream's paths (``airflow-core/tests/unit/...``,
``task-sdk/tests/task_sdk/...``, ``providers/<p>/tests/unit/...``, ``shared/<lib>/tests/...``).
This directory runs them against the patched build installed in ``.venv``:

* this conftest configures Airflow the way upstream's ``tests_common.pytest_plugin`` does (unit
  test mode, a private ``AIRFLOW_HOME`` and a fresh SQLite database), **before** Airflow is
  imported;
* ``tests_common/`` is a small subset of upstream's ``devel-common/src/tests_common`` with the same
  import paths, registered as a global plugin so its fixtures reach the tree's test files;
* :func:`pytest_configure` adds the test files the series adds under the tree (at the
  tree's HEAD) to the session, so ``dev/run_tests.py`` runs them as one more directory.

See README.md in this directory for what the shim provides and what it leaves out.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

# -- Airflow configuration: must happen before anything imports airflow ------------------------------
assert "airflow" not in sys.modules, "tests/upstream_unit must configure Airflow before it is imported"
_HOME = tempfile.TemporaryDirectory(prefix="upstream_unit_home_")
_home = Path(_HOME.name)
(_home / "dags").mkdir()
(_home / "plugins").mkdir()
for _key in [k for k in os.environ if k.startswith("AIRFLOW__")]:
    del os.environ[_key]
os.environ.update(
    {
        "AIRFLOW_HOME": str(_home),
        "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_home / 'unittests.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(_home / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(_home / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES": "airflow.*\nunit.*\n",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(_home / "logs"),
        "_IN_UNIT_TESTS": "true",
    }
)
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from tree_tests import tree_test_files


def _shim_dir_requested(config: pytest.Config) -> bool:
    for arg in config.args:
        path = Path(arg.split("::", 1)[0])
        if not path.is_absolute():
            path = Path(config.invocation_params.dir) / path
        if path.resolve() == HERE:
            return True
    return False


class _AirflowSharedAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """
    Import ``airflow_shared.<lib>`` (upstream's source package of a shared library, which its
    ``shared/<lib>/tests`` import) as the copy the installed core wheel vendors, ``airflow._shared.<lib>``.

    The module objects are the same, so a shared-library test sees exactly what core uses.
    """

    PREFIX = "airflow_shared"

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.PREFIX or fullname.startswith(self.PREFIX + "."):
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module("airflow._shared" + spec.name[len(self.PREFIX) :])

    def exec_module(self, module) -> None:
        """The vendored module is already executed."""


def pytest_configure(config: pytest.Config) -> None:
    # Upstream imports its test files by path; several share a basename (two test_failure_classification.py).
    config.option.importmode = "importlib"
    config.pluginmanager.import_plugin("tests_common.pytest_plugin")
    if not any(isinstance(f, _AirflowSharedAlias) for f in sys.meta_path):
        sys.meta_path.insert(0, _AirflowSharedAlias())
    if _shim_dir_requested(config):
        config.args.extend(str(p) for p in tree_test_files())


def pytest_unconfigure(config: pytest.Config) -> None:
    _HOME.cleanup()
