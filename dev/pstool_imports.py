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
"""The import graph of ``dev/pstool``: which of its modules each module imports, function-local imports
included (``ast``, nothing is imported). ``python3 dev/pstool_imports.py`` prints one module a line
and the cycles, if any; ``tests/tooling/test_pstool_layers.py`` holds the graph to its layers
(``docs/development/pstool-layout.md``).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = "pstool"
PACKAGE_DIR = Path(__file__).resolve().parent / PACKAGE


def modules(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    """{dotted name relative to the package ("" for the package itself, "checks.base"): file}."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_graph(package_dir: Path = PACKAGE_DIR) -> dict[str, list[str]]:
    """{module: the package's modules it imports}, names relative to the package ("" is ``pstool``)."""
    mods = modules(package_dir)
    graph = {}
    for name, path in mods.items():
        here = [PACKAGE, *name.split(".")] if name else [PACKAGE]
        package = here if path.name == "__init__.py" else here[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            for target in targets:
                if target != PACKAGE and not target.startswith(PACKAGE + "."):
                    continue
                rel = target.removeprefix(PACKAGE).removeprefix(".")
                if rel in mods:
                    deps.add(rel)
                    break  # ``from pstool.x import y``: the module y if it is one, else x
        deps.discard(name)
        graph[name] = sorted(deps)
    return graph


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in graph.get(node, []):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def main() -> int:
    package_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE_DIR
    graph = import_graph(package_dir)
    for name, deps in graph.items():
        print(f"{name or PACKAGE} -> {', '.join(d or PACKAGE for d in deps)}")
    found = cycles(graph)
    print("cycles: " + ("; ".join(" <-> ".join(c) for c in found) if found else "none"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
