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
"""``revision-heads-map`` and ``ti-history-columns``: the migrations' chain and heads map; the task instance history's columns. See ``pstool.checks``."""

from __future__ import annotations

import ast
import re

from pstool.checks.base import CORE, Finding, Tree

MIGRATIONS_DIR = f"{CORE}/migrations/versions"
DB_UTILS = f"{CORE}/utils/db.py"
TI_MODEL = f"{CORE}/models/taskinstance.py"
TIH_MODEL = f"{CORE}/models/taskinstancehistory.py"


# --- revision-heads-map -------------------------------------------------------------------------


def _module_constants(source: str) -> dict[str, object]:
    values: dict[str, object] = {}
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        for target in targets:
            if isinstance(target, ast.Name) and value is not None:
                try:
                    values[target.id] = ast.literal_eval(value)
                except ValueError:
                    pass
    return values


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def check_revision_heads_map(tree: Tree) -> list[Finding]:
    name = "revision-heads-map"
    migrations: dict[str, tuple[str | None, str, str]] = {}
    for path in tree.list_dir("HEAD", MIGRATIONS_DIR):
        if not path.endswith(".py") or path.endswith("__init__.py"):
            continue
        consts = _module_constants(tree.show("HEAD", path) or "")
        revision = consts.get("revision")
        if not isinstance(revision, str):
            continue
        down = consts.get("down_revision")
        migrations[revision] = (down if isinstance(down, str) else None, str(consts.get("airflow_version", "")), path)
    findings: list[Finding] = []
    children: dict[str | None, list[str]] = {}
    for rev, (down, _, path) in migrations.items():
        children.setdefault(down, []).append(rev)
        if down is not None and down not in migrations:
            findings.append(Finding(name, path, f"down_revision {down!r} names no migration"))
    for parent, kids in children.items():
        if len(kids) > 1:
            paths = ", ".join(sorted(migrations[k][2].rsplit("/", 1)[1] for k in kids))
            findings.append(Finding(name, MIGRATIONS_DIR, f"revision {parent!r} has {len(kids)} children ({paths}): the chain forks"))
    if findings:
        return findings
    chain: list[str] = []
    current = children.get(None, [])
    while current:
        chain.append(current[0])
        current = children.get(current[0], [])
    last_for_version: dict[str, str] = {}
    for rev in chain:
        last_for_version[migrations[rev][1]] = rev
    heads_map = _module_constants(tree.show("HEAD", DB_UTILS) or "").get("_REVISION_HEADS_MAP")
    if not isinstance(heads_map, dict):
        return [Finding(name, DB_UTILS, "_REVISION_HEADS_MAP is not a dict literal")]
    oldest = min(heads_map, key=_version_key)
    for version, rev in sorted(last_for_version.items(), key=lambda kv: _version_key(kv[0])):
        if _version_key(version) < _version_key(oldest):
            continue
        if heads_map.get(version) != rev:
            findings.append(
                Finding(name, DB_UTILS, f"_REVISION_HEADS_MAP[{version!r}] is {heads_map.get(version)!r}, "
                        f"but the last migration with airflow_version {version!r} is {rev!r} ({migrations[rev][2].rsplit('/', 1)[1]})")
            )
    for version in sorted(set(heads_map) - set(last_for_version), key=_version_key):
        findings.append(Finding(name, DB_UTILS, f"_REVISION_HEADS_MAP names {version!r}, which no migration carries"))
    return findings


# --- ti-history-columns -------------------------------------------------------------------------


def _class_columns(source: str | None, class_name: str) -> set[str]:
    if not source:
        return set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            columns = set()
            for stmt in node.body:
                target = stmt.target if isinstance(stmt, ast.AnnAssign) else stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
                value = getattr(stmt, "value", None)
                if isinstance(target, ast.Name) and isinstance(value, ast.Call):
                    func = value.func
                    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                    if called in ("mapped_column", "Column"):
                        columns.add(target.id)
            return columns
    return set()


def check_ti_history_columns(tree: Tree) -> list[Finding]:
    history_now = tree.show("HEAD", TIH_MODEL)
    if history_now is None:  # Airflow 3.4 folded the history into task_instance rows
        return []
    added = _class_columns(tree.show("HEAD", TI_MODEL), "TaskInstance") - _class_columns(tree.show(tree.base_ref, TI_MODEL), "TaskInstance")
    missing = sorted(added - _class_columns(history_now, "TaskInstanceHistory"))
    return [
        Finding("ti-history-columns", TIH_MODEL, f"TaskInstance.{col} is new, but TaskInstanceHistory has no {col} column")
        for col in missing
    ]
