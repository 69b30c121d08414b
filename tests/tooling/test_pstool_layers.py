# Licensed to the Apache Software Foundation (ASF) under one
# or more contributor license agreements.  See the NOTICE file
# distributed with this work for additional information
# regarding copyright ownership.  The ASF licenses this file
# to you under the Apache License, Version 2.0 (the
# "License"); you may not use this file except in compliance
# with the License.  You may obtain a copy of the License at
#
#   http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an
# "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
# KIND, either express or implied.  See the License for the
# specific language governing permissions and limitations
# under the License.
"""``dev/pstool`` is layered (issue 38, "the tooling's own shape"): each module imports only modules of
lower layers (function-local imports included), so its import graph has no cycle. The layers are
``docs/development/pstool-layout.md``'s; a new module gets one here, or this test fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.line_independent

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "dev") not in sys.path:
    sys.path.insert(0, str(REPO / "dev"))

from pstool_imports import cycles, import_graph  # noqa: E402

#: Lowest first. A module's group is its top-level name (``checks.base`` is in ``checks``); inside a
#: group (the ``checks`` package) imports need only be acyclic.
LAYERS: list[set[str]] = [
    {"", "paths", "layout"},  # the package (PatchsetError), where things are, the tree/wheel layout
    {"git", "lock", "series", "stamps"},  # git, the pins, the series file, verify's stamps
    {"tree", "ui", "checks", "lines", "releases", "twins", "unpatched", "hygiene", "ledger"},  # what is made of them
    {"build", "deps", "drift", "port", "release", "upstream"},  # what builds on a tree
    {"venv"},  # install: checkout + build + pip
    {"image", "generated"},  # the image; the generators (they run in the venv)
    {"verify"},  # everything verify checks
    {"__main__"},  # the command line
]


def group(module: str) -> str:
    return module.split(".", 1)[0]


def layer_of(module: str) -> int:
    for number, members in enumerate(LAYERS):
        if group(module) in members:
            return number
    raise AssertionError(f"pstool.{module} has no layer: give it one in LAYERS and docs/development/pstool-layout.md")


def test_every_module_has_a_layer() -> None:
    for module in import_graph():
        layer_of(module)


def test_the_import_graph_is_acyclic() -> None:
    assert cycles(import_graph()) == []


def test_each_module_imports_only_lower_layers() -> None:
    upward = [
        f"pstool.{module or '__init__'} (layer {layer_of(module)}) imports pstool.{dep or '__init__'} (layer {layer_of(dep)})"
        for module, deps in import_graph().items()
        for dep in deps
        if group(dep) != group(module) and layer_of(dep) >= layer_of(module)
    ]
    assert upward == []


def test_the_graph_sees_function_local_and_package_imports(tmp_path: Path) -> None:
    """The measure itself: a cycle made only by a function-local import, and one through a package's
    submodule, are found (the cycle pstool had, lock -> ui -> lock, was function-local)."""
    package = tmp_path / "pstool"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pstool.sub.b import thing\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("def thing():\n    from pstool import a\n    return a\n")
    (package / "c.py").write_text("import os\n")
    graph = import_graph(package)
    assert graph == {"": [], "a": ["sub.b"], "c": [], "sub": [], "sub.b": ["a"]}
    assert cycles(graph) == [["a", "sub.b"]]
