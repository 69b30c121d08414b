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
"""Each patch's ``Depends:`` trailer names what it needs (``pstool verify``, "patch dependencies").

A patch of feature F is an upstream pull request stacked on F's patches before it: what it may
need is F, the features its own ``Depends:`` names and those of F's patches before it, each with
its dependency closure (``declared``). A series condition (``when: oom retry-rules``) says where
the patch applies in this patch set; it does not say what an upstream reviewer must land first, so
it counts for nothing here. For every patch (integration patches excepted), on the line's pristine
release:

1. **git am**: the patches that ``declared`` selects, in series order up to the patch, then the
   patch itself, apply strictly (no fuzz, no 3-way; a hunk may sit at an offset, as when a feature
   is applied alone). When the patch does not apply, the check tries each other feature (with its
   closure) in series order and names the first one with which it does.
2. **Python imports**: every import the patch adds (module-level or in a function; not one guarded
   by ``try: ... except ImportError``) of a module in the tree resolves in that tree, and every name
   a ``from M import name`` takes is defined in ``M`` there. An import that resolves only in the full
   series' tree names the feature whose patch adds the module or the name. ``git am`` alone does
   not catch it: the patch applies, and fails at import.

The failure names the patch, the feature it needs and why (the hunk, or the import).
"""

from __future__ import annotations

import ast
import hashlib
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pstool import PatchsetError
from pstool.git import out
from pstool.series import (
    Patch,
    condition_holds,
    dependency_closure,
    features_in_order,
    select_patches,
)
from pstool.tree import apply_series, scratch_tree

_GUARDS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def declared_features(patch: Patch, patches: list[Patch]) -> frozenset[str]:
    """``patch``'s feature and the features its Depends names, each with its dependency closure."""
    closure: set[str] = {patch.feature}
    for name in patch.depends:
        closure |= dependency_closure(name, patches)
    return frozenset(closure)


# --- imports -----------------------------------------------------------------------------------


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether ``node`` sits in the body of a ``try`` that catches ImportError (or broader)."""
    child, current = node, parents.get(node)
    while current is not None:
        if isinstance(current, ast.Try) and child in current.body:
            for handler in current.handlers:
                if handler.type is None:
                    return True
                types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                if any(isinstance(t, ast.Name) and t.id in _GUARDS for t in types):
                    return True
        child, current = current, parents.get(current)
    return False


def module_candidates(module: str, tree: Path) -> list[str] | None:
    """Tree paths that may hold ``module`` (``x.py`` or ``x/__init__.py``); None for a module outside the tree."""
    parts = module.split(".")
    if parts[0] != "airflow":
        return None
    if parts[1:2] == ["sdk"]:
        if parts[2:3] == ["_shared"] and len(parts) > 3:
            base = f"shared/{parts[3]}/src/airflow_shared/{'/'.join(parts[3:])}"
        else:
            base = f"task-sdk/src/{'/'.join(parts)}"
    elif parts[1:2] == ["_shared"] and len(parts) > 2:
        base = f"shared/{parts[2]}/src/airflow_shared/{'/'.join(parts[2:])}"
    elif parts[1:2] == ["providers"]:
        base = None
        for depth in (1, 2):
            provider = parts[2 : 2 + depth]
            if len(provider) == depth and (tree / "providers" / Path(*provider) / "src").is_dir():
                base = f"providers/{'/'.join(provider)}/src/{'/'.join(parts)}"
        if base is None:
            return None
    else:
        base = f"airflow-core/src/{'/'.join(parts)}"
    return [f"{base}.py", f"{base}/__init__.py"]


def _module_file(module: str, tree: Path) -> tuple[str | None, list[str] | None]:
    candidates = module_candidates(module, tree)
    if candidates is None:
        return None, None
    return next((c for c in candidates if (tree / c).is_file()), None), candidates


def _defines(path: Path, name: str) -> bool:
    """Whether the module at ``path`` binds ``name`` at its top level (or is a package with that submodule)."""
    if path.name == "__init__.py" and ((path.parent / f"{name}.py").is_file() or (path.parent / name / "__init__.py").is_file()):
        return True
    try:
        module = ast.parse(path.read_text())
    except (SyntaxError, UnicodeDecodeError):
        return True  # not ours to judge here
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name) and sub.id == name:
                        return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if (alias.asname or alias.name.split(".")[0]) == name or alias.name == "*":
                    return True
        if isinstance(node, ast.Global) and name in node.names:
            return True
    # A lazy module (a module-level __getattr__): its names resolve at run time.
    return "__getattr__" in {n.name for n in module.body if isinstance(n, ast.FunctionDef)}


def _package(path: str) -> list[str] | None:
    """The dotted package of a tree file, for relative imports."""
    for marker in ("/src/",):
        if marker in path:
            rel = path.split(marker, 1)[1]
            parts = rel.split("/")[:-1]
            if parts and parts[0] == "airflow_shared":
                parts = ["airflow", "_shared", *parts[1:]]
            return parts
    return None


@dataclass(frozen=True)
class Import:
    module: str
    names: tuple[str, ...]  # empty for "import module"
    line: int


def added_imports(tree: Path, path: str, added: set[int]) -> list[Import]:
    """The unguarded imports on the lines a patch added to ``path`` (a .py file of ``tree``)."""
    try:
        module = ast.parse((tree / path).read_text())
    except (SyntaxError, UnicodeDecodeError, FileNotFoundError):
        return []
    parents = {child: node for node in ast.walk(module) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(module):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno not in added or _guarded(node, parents):
            continue
        if isinstance(node, ast.Import):
            found += [Import(alias.name, (), node.lineno) for alias in node.names]
            continue
        name = node.module or ""
        if node.level:
            package = _package(path)
            if package is None:
                continue
            package = package[: len(package) - node.level + 1]
            name = ".".join([*package, name] if name else package)
        found.append(Import(name, tuple(a.name for a in node.names if a.name != "*"), node.lineno))
    return found


def _added_lines(tree: Path) -> dict[str, set[int]]:
    """{path: line numbers} that HEAD's commit adds (Python files only)."""
    diff = out(tree, "diff", "--no-renames", "-U0", "HEAD~1", "HEAD", "--", "*.py")
    result: dict[str, set[int]] = {}
    current = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else None
        elif line.startswith("@@") and current:
            match = re.match(r"@@ -\S+ \+(\d+)(?:,(\d+))? @@", line)
            if match:
                start, count = int(match.group(1)), int(match.group(2) or 1)
                result.setdefault(current, set()).update(range(start, start + count))
    return result


def _provider_of(patches: list[Patch], path: str, name: str | None) -> Patch | None:
    """The first patch of the series that adds ``path`` (name None), or a line binding ``name`` in it."""
    binding = re.compile(
        rf"^\+\s*(?:(?:async\s+)?def\s+{re.escape(name)}\b|class\s+{re.escape(name)}\b|{re.escape(name)}\s*[:=]|.*\bimport\b.*\b{re.escape(name)}\b)"
    ) if name else None
    for patch in patches:
        current, new = None, False
        for line in patch.body.decode("utf-8", "replace").splitlines():
            if line.startswith("diff --git a/"):
                current, new = line.split(" b/", 1)[1], False
            elif line.startswith("new file mode"):
                new = True
            elif current == path:
                if name is None and new:
                    return patch
                if binding is not None and binding.match(line):
                    return patch
    return None


def import_problems(tree: Path, full_tree: Path, patch: Patch, patches: list[Patch], declared: frozenset[str]) -> list[str]:
    """What the imports ``patch`` adds need that ``declared`` lacks (see the module docstring)."""
    problems = []
    for path, lines in sorted(_added_lines(tree).items()):
        for imp in added_imports(tree, path, lines):
            found, candidates = _module_file(imp.module, tree)
            if candidates is None:
                continue
            if found is None:
                full = next((c for c in candidates if (full_tree / c).is_file()), None)
                if full is None:
                    continue  # not in the tree at all (a module the pinned wheels leave out)
                giver = _provider_of(patches, full, None)
                if giver is not None and giver.feature not in declared and not giver.is_integration:
                    problems.append(
                        f"{patch.name}: {path}:{imp.line} imports {imp.module}, which {giver.name} adds "
                        f"(feature {giver.feature}): it needs {giver.feature}"
                    )
                continue
            for name in imp.names:
                if _defines(tree / found, name) or not (full_tree / found).is_file() or not _defines(full_tree / found, name):
                    continue
                giver = _provider_of(patches, found, name)
                if giver is not None and giver.feature not in declared and not giver.is_integration:
                    problems.append(
                        f"{patch.name}: {path}:{imp.line} imports {name} from {imp.module}, which {giver.name} "
                        f"adds (feature {giver.feature}): it needs {giver.feature}"
                    )
    return problems


# --- the check ---------------------------------------------------------------------------------


def _wanted(entry: Patch, feature: str, features: frozenset[str]) -> bool:
    """Whether a tree checking ``feature``'s patches with ``features`` applies ``entry``.

    Another feature's patch and an integration patch: where the series would (``select_patches``).
    One of ``feature``'s own: always, unless its condition excludes a feature (``!x``) that is there:
    a condition's required features are what its Depends must name, and a missing one must show.
    """
    if entry.is_integration or entry.feature != feature:
        return entry in select_patches([entry], features)
    return condition_holds(tuple(t for t in entry.when if t.startswith("!")), features)


def _tree_until(patches: list[Patch], feature: str, features: frozenset[str], last: Patch) -> Path:
    """A pristine tree with what ``features`` apply before ``last`` (see :func:`_wanted`), then ``last``."""
    todo = []
    for entry in patches:
        if entry is last or _wanted(entry, feature, features):
            todo.append(entry)
        if entry is last:
            break
    tree = scratch_tree()
    try:
        apply_series(tree, todo, allow_offset=True)
    except BaseException:
        shutil.rmtree(tree, ignore_errors=True)
        raise
    return tree


def _needed_feature(patches: list[Patch], patch: Patch, declared: frozenset[str]) -> str | None:
    """The first feature (series order) with whose closure added ``patch`` applies; None if none does."""
    for other in features_in_order(patches):
        if other in declared:
            continue
        try:
            tree = _tree_until(patches, patch.feature, declared | dependency_closure(other, patches), patch)
        except PatchsetError:
            continue
        shutil.rmtree(tree, ignore_errors=True)
        return other
    return None


STAMP = "patch-dependencies"
PENDING_FILE = "dev/verify-pending.toml"
#: The modules whose code decides this check's outcome (with the patches, its stamp's key).
STAMP_MODULES = ("deps.py", "series.py", "tree.py", "git.py")


def stamp_key(patches: list[Patch], pending: dict[str, str] | None = None) -> str:
    """The stamp of a passed check (:mod:`pstool.stamps`): every patch, its condition, what is pending, and this check's code."""
    from pstool import stamps

    here = Path(__file__).resolve().parent
    parts = [f"{p.name} {' '.join(p.when)} {hashlib.sha256(p.body).hexdigest()}" for p in patches]
    parts += [f"pending {name}" for name in sorted(pending or {})]
    parts += [f"{name}:{hashlib.sha256((here / name).read_bytes()).hexdigest()}" for name in STAMP_MODULES]
    return stamps.key(STAMP, *parts)


def load_pending(root: Path) -> dict[str, str]:
    """{patch name: reason} of ``dev/verify-pending.toml``'s ``[[depends]]``: Depends another change is fixing now."""
    import tomllib

    path = root / PENDING_FILE
    if not path.is_file():
        return {}
    pending = {}
    for number, entry in enumerate(tomllib.loads(path.read_text()).get("depends", []), 1):
        if not entry.get("patch") or not entry.get("reason"):
            raise PatchsetError(f"{PENDING_FILE}: [[depends]] number {number} needs patch and reason")
        pending[entry["patch"]] = entry["reason"]
    return pending


def check_patch_dependencies(
    patches: list[Patch], full_tree: Path, pending: dict[str, str] | None = None
) -> Iterator[str]:
    """Check every feature patch's Depends against what it needs; yield one line per feature as it passes.

    ``full_tree`` is the full series applied (verify's strict-apply tree): where an import resolves
    when it does not in the patch's own selection. One tree per feature and distinct ``declared``
    set, each patch applied on top of the one before. A pass is stamped on the machine
    (:mod:`pstool.stamps`, :func:`stamp_key`): the same series is not checked again. A patch in
    ``pending`` (:func:`load_pending`) that fails is reported, not refused; one that passes fails
    the check (its entry is stale).
    """
    from pstool import stamps

    pending = {name: why for name, why in (pending or {}).items() if any(p.name == name for p in patches)}
    key = stamp_key(patches, pending)
    if stamps.passed(STAMP, key):
        yield f"every patch applies, and its imports resolve, with what its own Depends names (stamped {key})"
        return
    passed: list[str] = []
    problems: list[tuple[str, str]] = []  # (patch name, what it needs)
    index = {id(p): i for i, p in enumerate(patches)}
    for feature in features_in_order(patches):
        own = [p for p in patches if p.feature == feature]
        tree: Path | None = None
        current: frozenset[str] | None = None
        position, failed = 0, False
        try:
            for patch in own:
                declared = declared_features(patch, patches)
                if declared != current:
                    if tree is not None:
                        shutil.rmtree(tree, ignore_errors=True)
                    tree, current, position = scratch_tree(), declared, 0
                before = [e for e in patches[position : index[id(patch)]] if _wanted(e, feature, declared)]
                try:
                    apply_series(tree, before, allow_offset=True)
                    apply_series(tree, [patch], allow_offset=True)
                except PatchsetError as err:
                    # Which feature would do is looked for only where it is not known already.
                    needed = None if patch.name in pending else _needed_feature(patches, patch, declared)
                    detail = str(err).strip().splitlines()
                    problems.append((patch.name,
                        f"{patch.name} (Depends: {', '.join(patch.depends) or 'none'}) does not apply with "
                        f"{', '.join(sorted(declared))}, on {feature}'s patches before it"
                        + (f": it needs {needed}, which its Depends must name" if needed else
                           ": no single further feature makes it apply")
                        + "\n      " + "\n      ".join(detail[:6])
                    ))
                    failed, current = True, None  # the next patch starts a tree of its own
                    continue
                position = index[id(patch)] + 1
                found = import_problems(tree, full_tree, patch, patches, declared)
                problems += [(patch.name, text) for text in found]
                failed = failed or bool(found)
        finally:
            if tree is not None:
                shutil.rmtree(tree, ignore_errors=True)
        if not failed:
            needs = sorted({f for p in own for f in declared_features(p, patches)} - {feature})
            passed.append(
                f"{feature}: each of its {len(own)} patch(es) applies, and its imports resolve, with what its "
                f"own Depends names ({', '.join(needs) or 'no dependencies'})"
            )
            yield passed[-1]
    refused = [text for name, text in problems if name not in pending]
    waiting = sorted({name for name, _ in problems if name in pending})
    stale = sorted(set(pending) - set(waiting))
    errors = []
    if refused:
        errors.append(
            "Depends: trailers that do not name what a patch needs on the pristine release:\n"
            + "\n".join(f"  {p}" for p in refused)
        )
    if stale:
        errors.append(f"{PENDING_FILE}: these [[depends]] entries' patches pass now (remove them): {', '.join(stale)}")
    if errors:
        raise PatchsetError("\n".join(errors))
    if waiting:
        yield f"pending in {PENDING_FILE} (another change fixes their Depends): {', '.join(waiting)}"
    stamps.record(STAMP, key, "; ".join(passed))
