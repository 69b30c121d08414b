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
"""``execution-api-versions`` and ``cadwyn-response-defaults``: Execution API changes come with their Cadwyn version changes. See ``pstool.checks``."""

from __future__ import annotations

import ast

from pstool.checks.base import (
    EXEC_API,
    SUPERVISOR_SCHEMA,
    SUPERVISOR_SCHEMA_VERSIONS,
    Finding,
    Tree,
    _schema_definitions,
)

# --- execution-api-versions ---------------------------------------------------------------------




def check_execution_api_versions(tree: Tree) -> list[Finding]:
    name = "execution-api-versions"
    findings = []
    for commit in tree.commits():
        paths = commit.changes
        api_changed = sorted(
            p for p in paths
            if p.startswith(f"{EXEC_API}/datamodels/") and p.endswith(".py") and not p.endswith("__init__.py")
        )
        versions_changed = any(p.startswith(f"{EXEC_API}/versions/") for p in paths)
        if api_changed and not versions_changed:
            findings.append(
                Finding(name, commit.subject, f"changes {', '.join(api_changed)} but no file under {EXEC_API}/versions/ (add a Cadwyn VersionChange)")
            )
        if SUPERVISOR_SCHEMA in paths and paths[SUPERVISOR_SCHEMA] == "M":
            before = _schema_definitions(tree.show(f"{commit.sha}^", SUPERVISOR_SCHEMA))
            after = _schema_definitions(tree.show(commit.sha, SUPERVISOR_SCHEMA))
            changed = sorted(k for k in before if k in after and before[k] != after[k])
            if changed and not any(p.startswith(SUPERVISOR_SCHEMA_VERSIONS) for p in paths):
                findings.append(
                    Finding(name, commit.subject, f"changes existing supervisor schema bodies ({', '.join(changed)}) "
                            f"but no file under {SUPERVISOR_SCHEMA_VERSIONS} (add a schema VersionChange)")
                )
    return findings


# --- cadwyn-response-defaults -------------------------------------------------------------------


def _decorator_names(func: ast.AST) -> set[str]:
    names = set()
    for dec in getattr(func, "decorator_list", []):
        target = dec.func if isinstance(dec, ast.Call) else dec
        names.add(target.id if isinstance(target, ast.Name) else getattr(target, "attr", ""))
    return names


def _didnt_exist_fields(cls: ast.ClassDef) -> list[tuple[str, str]]:
    found = []
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and node.attr == "didnt_exist":
            field_call = node.value
            if isinstance(field_call, ast.Call) and isinstance(field_call.func, ast.Attribute) and field_call.func.attr == "field":
                schema_call = field_call.func.value
                if (
                    isinstance(schema_call, ast.Call)
                    and getattr(schema_call.func, "id", "") == "schema"
                    and schema_call.args
                    and isinstance(schema_call.args[0], ast.Name)
                    and field_call.args
                    and isinstance(field_call.args[0], ast.Constant)
                ):
                    found.append((schema_call.args[0].id, str(field_call.args[0].value)))
    return found


def _field_default(module: ast.Module, class_name: str, field: str) -> bool | None:
    for node in ast.walk(module):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == field:
                    if stmt.value is not None:
                        return True
                    ann = stmt.annotation
                    if isinstance(ann, ast.Subscript) and getattr(ann.value, "id", "") == "Annotated":
                        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
                        return any(
                            isinstance(m, ast.Call) and getattr(m.func, "id", "") == "Field"
                            and any(k.arg in ("default", "default_factory") for k in m.keywords)
                            for m in elts[1:]
                        )
                    return False
    return None


def _stripped_without_default(tree: Tree, rev: str) -> dict[tuple[str, str, str], str]:
    """{(version file, VersionChange, "Class.field"): source path} for stripped fields lacking a default."""
    found = {}
    for path in tree.list_dir(rev, f"{EXEC_API}/versions"):
        if not path.rsplit("/", 1)[1].startswith("v") or not path.endswith(".py"):
            continue
        module = ast.parse(tree.show(rev, path) or "")
        imports = {
            alias.asname or alias.name: node.module
            for node in ast.walk(module) if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        }
        for cls in (n for n in ast.walk(module) if isinstance(n, ast.ClassDef)):
            if not any("convert_response_to_previous_version_for" in _decorator_names(f) for f in cls.body):
                continue
            for class_name, field in _didnt_exist_fields(cls):
                source_module = imports.get(class_name)
                source_path = f"airflow-core/src/{source_module.replace('.', '/')}.py" if source_module else path
                source = tree.show(rev, source_path)
                if source and _field_default(ast.parse(source), class_name, field) is False:
                    found[(path, cls.name, f"{class_name}.{field}")] = source_path
    return found


def check_cadwyn_response_defaults(tree: Tree) -> list[Finding]:
    # Only what the series introduces: pristine upstream's own version files are upstream's concern.
    before = _stripped_without_default(tree, tree.base_ref)
    return [
        Finding("cadwyn-response-defaults", path, f"{change} strips {field} from responses, but {source} declares it "
                "without a default: after the field is popped, the response fails validation and older clients get a 500")
        for (path, change, field), source in sorted(_stripped_without_default(tree, "HEAD").items())
        if (path, change, field) not in before
    ]
