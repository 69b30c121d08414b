"""Upstream's review checks, as ours: run on a materialized tree, per patch where upstream's would.

Upstream Airflow enforces these with prek hooks and CI jobs that this repository cannot run (they
need the whole monorepo). Each check here is our own implementation of the rule the hook enforces,
written from what the hook checks, and applied to what the series changes:

``revision-heads-map``
    ``_REVISION_HEADS_MAP`` in ``utils/db.py`` maps every Airflow version to the last migration
    revision carrying that ``airflow_version``; the migrations form one chain with one head.
``ti-history-columns``
    Every column the series adds to ``TaskInstance`` is on ``TaskInstanceHistory`` too (the history
    copies same-named columns; a column missing there is silently lost when a try is archived).
``execution-api-versions``
    A patch that changes an Execution API datamodel or route also changes ``execution_api/versions/``
    (a Cadwyn version change); a patch that changes an existing body in the supervisor schema
    snapshot also changes ``execution_time/schema/versions/`` (see that directory's AGENTS.md).
``cadwyn-response-defaults``
    A field that a response-converting ``VersionChange`` declares ``didnt_exist`` has a default on
    its HEAD class (otherwise FastAPI re-validates the stripped body and old clients get a 500).
``licence-header``
    Every file a patch adds carries the full ASF licence header.
``config-options``
    Every ``config.yml`` option the series adds has a description, ``version_added``, a known type,
    an example and a default.
``metrics-registry``
    Every metric name the series emits is in ``metrics_template.yaml``; nothing imports ``incr`` and
    friends from the stats module directly.
``generated-in-patch``
    A patch that changes the fields of a model that a generated file holds (the supervisor
    ``schema.json`` for the comms and callback-request models, the task-sdk ``_generated.py`` for
    the Execution API datamodels, the REST specs for the public and UI API datamodels) regenerates
    that file in the *same* patch, as upstream's prek hooks make each commit do; not a later patch.
``ruff``
    The Python files the series adds or changes hold no lint finding that the pristine file did
    not (upstream's ruff rules that do not depend on per-directory settings: import order, pyflakes,
    pycodestyle, pyupgrade for Python 3.10, logging calls), and every Python file the series adds is
    ``ruff format``-clean; settings are upstream's root ones (``dev/generator-root/pyproject.toml``).
    The only check that needs a tool: ``ruff`` from the venv (pinned in each line's ``lines/<line>/constraints.txt``).
``newsfragments``
    A newsfragment a patch adds is named ``<id>.<type>.rst`` with one of towncrier's types, and a
    ``significant`` one carries the template's "Types of change" (one box ticked) and
    "Migration rules needed" sections.
``operator-docs``
    Ours, not upstream's: every ``config.yml`` option the series adds is in the operator guide
    (``docs/operations.md``) and in the Helm values (``monitoring/helm-values.yaml``, under
    ``config: <section>:``); every metric the series adds to ``metrics_template.yaml`` is in the
    operator guide and matched by a mapping of ``monitoring/statsd-mappings.yml`` (with the default
    ``airflow.`` prefix). The documents are the repository's (``pstool.paths.DOCS_ROOT``).

Everything else is stdlib-only (``ast`` for Python, line-oriented reading of the two YAML files,
whose layout upstream keeps fixed), so those checks run before any virtualenv exists.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pstool.git import git, out

BASE_REF = "refs/patches/upstream-base"

CORE = "airflow-core/src/airflow"
MIGRATIONS_DIR = f"{CORE}/migrations/versions"
DB_UTILS = f"{CORE}/utils/db.py"
TI_MODEL = f"{CORE}/models/taskinstance.py"
TIH_MODEL = f"{CORE}/models/taskinstancehistory.py"
EXEC_API = f"{CORE}/api_fastapi/execution_api"
SUPERVISOR_SCHEMA = "task-sdk/src/airflow/sdk/execution_time/schema/schema.json"
SUPERVISOR_SCHEMA_VERSIONS = "task-sdk/src/airflow/sdk/execution_time/schema/versions/"
CONFIG_YML = f"{CORE}/config_templates/config.yml"
METRICS_REGISTRY = "shared/observability/src/airflow_shared/observability/metrics/metrics_template.yaml"

LICENCE_LINES = (
    "Licensed to the Apache Software Foundation (ASF) under one",
    "or more contributor license agreements.  See the NOTICE file",
    "distributed with this work for additional information",
    "regarding copyright ownership.  The ASF licenses this file",
    "to you under the Apache License, Version 2.0 (the",
    '"License"); you may not use this file except in compliance',
    "with the License.  You may obtain a copy of the License at",
    "http://www.apache.org/licenses/LICENSE-2.0",
    "Unless required by applicable law or agreed to in writing,",
    "software distributed under the License is distributed on an",
    '"AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY',
    "KIND, either express or implied.  See the License for the",
    "specific language governing permissions and limitations",
    "under the License.",
)
# Files upstream's insert-license hooks cover; data files (JSON, lock files), generated files and
# newsfragments carry no header upstream either.
LICENSED_SUFFIXES = (".py", ".pyi", ".sh", ".yaml", ".yml", ".ts", ".tsx", ".js", ".jsx", ".rst", ".md", ".toml", ".cfg")
CONFIG_OPTION_KEYS = ("description", "version_added", "type", "example", "default")
CONFIG_TYPES = {"string", "boolean", "integer", "float", "enum", "list"}
NEWSFRAGMENT_TYPES = {"significant", "feature", "improvement", "bugfix", "doc", "misc"}
STATS_METHODS = ("incr", "decr", "gauge", "timing", "timer")


@dataclass(frozen=True)
class Finding:
    """One violation: which check, where (a patch subject or a file), and what is wrong."""

    check: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.where}: {self.message}"


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    changes: dict[str, str]  # path -> A|M|D


class Tree:
    """Read access to a materialized tree: files at a revision, and the series' commits."""

    def __init__(self, path: Path, base_ref: str = BASE_REF) -> None:
        self.path = path
        self.base_ref = base_ref

    def show(self, rev: str, path: str) -> str | None:
        proc = git(self.path, "show", f"{rev}:{path}", check=False)
        return proc.stdout.decode("utf-8", "replace") if proc.returncode == 0 else None

    def list_dir(self, rev: str, path: str) -> list[str]:
        listing = out(self.path, "ls-tree", "--name-only", f"{rev}:{path}") if self.show(rev, path) is not None else ""
        return [f"{path}/{name}" for name in listing.splitlines()]

    def commits(self) -> list[Commit]:
        result = []
        for sha in out(self.path, "rev-list", "--reverse", f"{self.base_ref}..HEAD").split():
            raw = out(self.path, "diff-tree", "--no-commit-id", "--no-renames", "--name-status", "-r", f"{sha}^", sha)
            changes = {}
            for line in raw.splitlines():
                status, name = line.split("\t", 1)
                changes[name] = status[0]
            result.append(Commit(sha, out(self.path, "log", "-1", "--format=%s", sha), changes))
        return result

    def added_lines(self, path: str) -> list[str]:
        diff = out(self.path, "diff", "--no-renames", "-U0", self.base_ref, "HEAD", "--", path)
        return [ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]

    def changed_paths(self) -> dict[str, str]:
        raw = out(self.path, "diff", "--no-renames", "--name-status", self.base_ref, "HEAD")
        return {line.split("\t", 1)[1]: line[0] for line in raw.splitlines()}


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


# --- execution-api-versions ---------------------------------------------------------------------


def _schema_definitions(text: str | None) -> dict[str, object]:
    import json

    if not text:
        return {}
    data = json.loads(text)
    return data.get("$defs") or data.get("definitions") or {}


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


# --- licence-header -----------------------------------------------------------------------------


def check_licence_header(tree: Tree) -> list[Finding]:
    findings = []
    for commit in tree.commits():
        for path, status in sorted(commit.changes.items()):
            if status != "A" or not path.endswith(LICENSED_SUFFIXES) or "/newsfragments/" in path:
                continue
            if "/openapi-gen/" in path or path.endswith(("_generated.py", "-generated.yaml")):
                continue
            text = tree.show(commit.sha, path) or ""
            head = [re.sub(r"^\s*(#|//|\*|/\*|\.\.|<!--)?\s?", "", ln).strip() for ln in text.splitlines()[:40]]
            missing = [ln for ln in LICENCE_LINES if ln not in head]
            if missing:
                findings.append(
                    Finding("licence-header", commit.subject, f"{path} lacks the full ASF licence header (missing {missing[0]!r}"
                            + (f" and {len(missing) - 1} more line(s))" if len(missing) > 1 else ")"))
                )
    return findings


# --- config-options -----------------------------------------------------------------------------


def _config_options(text: str | None) -> dict[tuple[str, str], dict[str, str]]:
    """{(section, option): {key: raw value}} from config.yml's fixed two-space layout."""
    options: dict[tuple[str, str], dict[str, str]] = {}
    section = option = None
    in_options = False
    for line in (text or "").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, _, value = line.strip().partition(":")
        if indent == 0:
            section, option, in_options = key, None, False
        elif indent == 2:
            in_options = key == "options"
            option = None
        elif indent == 4 and in_options and section:
            option = key
            options[(section, option)] = {}
        elif indent == 6 and option and section:
            options[(section, option)][key] = value.strip()
    return options


def check_config_options(tree: Tree) -> list[Finding]:
    before = _config_options(tree.show(tree.base_ref, CONFIG_YML))
    findings = []
    for (section, option), fields in sorted(_config_options(tree.show("HEAD", CONFIG_YML)).items()):
        if (section, option) in before:
            continue
        where = f"{CONFIG_YML} [{section}] {option}"
        missing = [k for k in CONFIG_OPTION_KEYS if k not in fields]
        if missing:
            findings.append(Finding("config-options", where, f"lacks {', '.join(missing)}"))
        if fields.get("version_added", "~") in ("~", "", "null"):
            findings.append(Finding("config-options", where, "a new option needs version_added"))
        if fields.get("type") and fields["type"] not in CONFIG_TYPES:
            findings.append(Finding("config-options", where, f"type {fields['type']!r} is not one of {sorted(CONFIG_TYPES)}"))
    return findings


# --- metrics-registry ---------------------------------------------------------------------------


def _registry_patterns(text: str | None) -> list[re.Pattern[str]]:
    names = re.findall(r'^\s*-\s*name:\s*"([^"]+)"', text or "", flags=re.MULTILINE)
    return [re.compile("^" + re.sub(r"\\\{[^}]*\\\}", ".+", re.escape(n)) + "$") for n in names]


_METHODS = "|".join(STATS_METHODS)
_STATS_CALL = re.compile(rf"\b[Ss]tats\.(?:{_METHODS})\(\s*(f?)([\"'])(.+?)\2")
_DIRECT_IMPORT = re.compile(rf"from\s+\S*observability\.metrics\.stats\s+import\s+.*\b(?:{_METHODS})\b")


def check_metrics_registry(tree: Tree) -> list[Finding]:
    registry = _registry_patterns(tree.show("HEAD", METRICS_REGISTRY))
    findings = []
    for path in sorted(tree.changed_paths()):
        if not path.endswith(".py") or "/tests/" in path or path.startswith(("tests/", "devel-common/")):
            continue
        for line in tree.added_lines(path):
            if _DIRECT_IMPORT.search(line):
                findings.append(Finding("metrics-registry", path, f"imports a stats function directly: {line.strip()}"))
            for is_f, _, metric in _STATS_CALL.findall(line):
                probe = re.sub(r"\{[^}]*\}", "x", metric) if is_f else metric
                if not any(p.match(probe) for p in registry):
                    findings.append(Finding("metrics-registry", path, f"metric {metric!r} is not in {METRICS_REGISTRY}"))
    return findings


# --- operator-docs ------------------------------------------------------------------------------

OPERATOR_GUIDE = "docs/operations.md"
STATSD_MAPPINGS = "monitoring/statsd-mappings.yml"
HELM_VALUES = "monitoring/helm-values.yaml"
STATSD_PREFIX = "airflow"


def _registry_entries(text: str | None) -> dict[str, str | None]:
    """{metric name: its legacy name, or None} of the registry (``legacy_name: "-"`` is none)."""
    entries: dict[str, str | None] = {}
    current = None
    for line in (text or "").splitlines():
        if m := re.match(r'^\s*-\s*name:\s*"([^"]+)"', line):
            current = m.group(1)
            entries[current] = None
        elif current and (m := re.match(r'^\s+legacy_name:\s*"([^"]+)"', line)):
            entries[current] = None if m.group(1) in ("-", current) else m.group(1)
    return entries


def new_config_options(tree: Tree) -> list[tuple[str, str]]:
    """(section, option) of every ``config.yml`` option the series adds, in order."""
    before = _config_options(tree.show(tree.base_ref, CONFIG_YML))
    return sorted(key for key in _config_options(tree.show("HEAD", CONFIG_YML)) if key not in before)


def new_metrics(tree: Tree) -> dict[str, str | None]:
    """{name: legacy name or None} of every metric the series adds to the metrics registry."""
    before = _registry_entries(tree.show(tree.base_ref, METRICS_REGISTRY))
    after = _registry_entries(tree.show("HEAD", METRICS_REGISTRY))
    return {name: after[name] for name in sorted(after) if name not in before}


def _mentions(text: str, name: str) -> bool:
    """``name`` appears in ``text`` as a whole name (not inside a longer option or metric name)."""
    return re.search(rf"(?<![\w.]){re.escape(name)}(?![\w]|\.\w)", text) is not None


def _helm_config_options(text: str) -> set[tuple[str, str]]:
    """(section, option) under the Helm values' top-level ``config:`` (two-space indents)."""
    found: set[tuple[str, str]] = set()
    in_config, section = False, None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        key = line.strip().split(":", 1)[0].strip().strip("\"'")
        if indent == 0:
            in_config, section = key == "config", None
        elif in_config and indent == 2:
            section = key
        elif in_config and indent == 4 and section:
            found.add((section, key))
    return found


def _statsd_patterns(text: str) -> list[re.Pattern[str]]:
    """The ``match:`` globs of statsd_exporter mappings (``*`` is one dot-free component)."""
    globs = re.findall(r"^\s*-?\s*match:\s*[\"']?([^\"'\s#]+)", text, flags=re.MULTILINE)
    return [re.compile("^" + re.escape(g).replace(r"\*", r"[^.]+") + "$") for g in globs]


def _read(root: Path, name: str) -> str | None:
    path = root / name
    return path.read_text() if path.is_file() else None


def check_operator_docs(tree: Tree, docs_root: Path | None = None) -> list[Finding]:
    from pstool.paths import DOCS_ROOT

    root = docs_root or DOCS_ROOT
    name = "operator-docs"
    options, metrics = new_config_options(tree), new_metrics(tree)
    if not options and not metrics:
        return []
    guide, mappings, helm = (_read(root, f) for f in (OPERATOR_GUIDE, STATSD_MAPPINGS, HELM_VALUES))
    findings = [
        Finding(name, f, "is missing (the series adds options or metrics it must document)")
        for f, text in ((OPERATOR_GUIDE, guide), (STATSD_MAPPINGS, mappings), (HELM_VALUES, helm))
        if text is None and (metrics or f != STATSD_MAPPINGS) and (options or f != HELM_VALUES)
    ]
    helm_options = _helm_config_options(helm or "")
    for section, option in options:
        what = f"option [{section}] {option}"
        if guide is not None and not _mentions(guide, option):
            findings.append(Finding(name, OPERATOR_GUIDE, f"{what} (added to {CONFIG_YML}) is not in {OPERATOR_GUIDE}"))
        if helm is not None and (section, option) not in helm_options:
            findings.append(
                Finding(name, HELM_VALUES, f"{what} (added to {CONFIG_YML}) is not in {HELM_VALUES} (config: {section}: {option}:)")
            )
    patterns = _statsd_patterns(mappings or "")
    for metric, legacy in metrics.items():
        what = f"metric {metric}"
        if guide is not None and not _mentions(guide, metric):
            findings.append(Finding(name, OPERATOR_GUIDE, f"{what} (added to the metrics registry) is not in {OPERATOR_GUIDE}"))
        # Airflow sends the name, and the legacy name too while [metrics] legacy_names_on holds: both are mapped.
        for sent, kind in ((metric, "name"), (legacy, "legacy name")):
            if sent is None or mappings is None:
                continue
            probe = f"{STATSD_PREFIX}." + re.sub(r"\{[^}]*\}", "x", sent)
            if not any(p.match(probe) for p in patterns):
                findings.append(
                    Finding(name, STATSD_MAPPINGS, f"{what} (added to the metrics registry): its {kind} {sent} has no "
                            f"mapping in {STATSD_MAPPINGS} (nothing matches {probe})")
                )
    return findings


# --- generated-in-patch --------------------------------------------------------------------------

SDK_MODELS = "task-sdk/src/airflow/sdk/api/datamodels/_generated.py"
REST_SPECS = (
    f"{CORE}/api_fastapi/core_api/openapi/v2-rest-api-generated.yaml",
    f"{CORE}/api_fastapi/core_api/openapi/_private_ui.yaml",
)
# generated file -> the source files whose models it is generated from
GENERATED_FROM: dict[str, tuple[str, ...]] = {
    SUPERVISOR_SCHEMA: (
        "task-sdk/src/airflow/sdk/execution_time/comms.py",
        f"{CORE}/callbacks/callback_requests.py",
        SDK_MODELS,
    ),
    SDK_MODELS: (f"{EXEC_API}/datamodels/",),
    REST_SPECS[0]: (f"{CORE}/api_fastapi/core_api/datamodels/",),
    REST_SPECS[1]: (f"{CORE}/api_fastapi/core_api/datamodels/",),
}


def _generated_model_names(path: str, text: str | None) -> set[str]:
    """The model names a generated file holds."""
    if not text:
        return set()
    if path.endswith(".json"):
        return set(_schema_definitions(text))
    if path.endswith(".py"):
        return {n.name for n in ast.parse(text).body if isinstance(n, ast.ClassDef)}
    names, in_schemas = set(), False
    for line in text.splitlines():  # components: / schemas: / <Name>: at four spaces
        if line.startswith("  schemas:"):
            in_schemas = True
        elif in_schemas and re.match(r"^  \S", line):
            in_schemas = False
        elif in_schemas and (m := re.match(r"^    ([A-Za-z_][A-Za-z0-9_]*):\s*$", line)):
            names.add(m.group(1))
    return names


def _field_lines(source: str | None) -> dict[str, set[int]]:
    """{class name: line numbers of its field declarations (annotated assignments, model_config)}."""
    result: dict[str, set[int]] = {}
    if not source:
        return result
    try:
        module = ast.parse(source)
    except SyntaxError:
        return result
    for node in ast.walk(module):
        if isinstance(node, ast.ClassDef):
            lines: set[int] = set()
            for stmt in node.body:
                is_config = isinstance(stmt, ast.Assign) and any(getattr(t, "id", "") == "model_config" for t in stmt.targets)
                if isinstance(stmt, ast.AnnAssign) or is_config:
                    lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
            result[node.name] = lines
    return result


def _changed_lines(tree: Tree, sha: str, path: str) -> tuple[set[int], set[int]]:
    """(old line numbers removed, new line numbers added) by ``sha`` in ``path``."""
    diff = out(tree.path, "diff", "--no-renames", "-U0", f"{sha}^", sha, "--", path)
    old: set[int] = set()
    new: set[int] = set()
    for m in re.finditer(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", diff, flags=re.MULTILINE):
        o, oc, n, nc = int(m.group(1)), int(m.group(2) or 1), int(m.group(3)), int(m.group(4) or 1)
        old.update(range(o, o + oc))
        new.update(range(n, n + nc))
    return old, new


def _changed_models(tree: Tree, sha: str, path: str) -> set[str]:
    """Classes of ``path`` whose field declarations ``sha`` adds, removes or edits."""
    old_lines, new_lines = _changed_lines(tree, sha, path)
    changed = set()
    for rev, lines in ((f"{sha}^", old_lines), (sha, new_lines)):
        for cls, field_lines in _field_lines(tree.show(rev, path)).items():
            if field_lines & lines:
                changed.add(cls)
    return changed


def check_generated_in_patch(tree: Tree) -> list[Finding]:
    findings = []
    for commit in tree.commits():
        for generated, sources in GENERATED_FROM.items():
            if generated in commit.changes:
                continue
            touched = sorted(
                p for p in commit.changes
                if p.endswith(".py") and commit.changes[p] != "D" and any(p == s or (s.endswith("/") and p.startswith(s)) for s in sources)
            )
            if not touched:
                continue
            held = _generated_model_names(generated, tree.show(commit.sha, generated))
            models = sorted({m for p in touched for m in _changed_models(tree, commit.sha, p)} & held)
            if models:
                findings.append(
                    Finding("generated-in-patch", commit.subject, f"changes {', '.join(models)}, which {generated} holds, "
                            "but does not regenerate it (run `pstool regenerate --tree` and commit it with this change)")
                )
    return findings


# --- newsfragments ------------------------------------------------------------------------------


def check_newsfragments(tree: Tree) -> list[Finding]:
    findings = []
    for commit in tree.commits():
        for path, status in sorted(commit.changes.items()):
            if status != "A" or "/newsfragments/" not in path:
                continue
            filename = path.rsplit("/", 1)[1]
            match = re.fullmatch(r"([0-9a-z][0-9a-z._-]*)\.([a-z]+)\.rst", filename)
            if not match or match.group(2) not in NEWSFRAGMENT_TYPES:
                findings.append(
                    Finding("newsfragments", commit.subject, f"{path}: name must be <id>.<type>.rst with type one of {sorted(NEWSFRAGMENT_TYPES)}")
                )
                continue
            text = tree.show(commit.sha, path) or ""
            if not text.strip():
                findings.append(Finding("newsfragments", commit.subject, f"{path} is empty"))
            if match.group(2) == "significant":
                if "* Types of change" not in text:
                    findings.append(Finding("newsfragments", commit.subject, f"{path} lacks the '* Types of change' section"))
                elif not re.search(r"\[x\]", text, flags=re.IGNORECASE):
                    findings.append(Finding("newsfragments", commit.subject, f"{path} ticks no box under '* Types of change'"))
                if "* Migration rules needed" not in text:
                    findings.append(Finding("newsfragments", commit.subject, f"{path} lacks the '* Migration rules needed' section"))
    return findings


# --- ruff -------------------------------------------------------------------------------------------

RUFF_CONFIG = Path(__file__).resolve().parents[1] / "generator-root" / "pyproject.toml"
# Rules whose result does not depend on upstream's per-directory settings (type-checking imports
# and docstring rules do: the pristine files would fail them here too).
RUFF_SELECT = "I,F,E,W,UP,G,LOG,ISC,ASYNC"
# Upstream's ignores among those (the command line's --select replaces the config's lists).
RUFF_IGNORE = "E501,ISC004,LOG004,W191,E111,E114,E117"
GENERATED_PY = ("task-sdk/src/airflow/sdk/api/datamodels/_generated.py",)


def _ruff() -> str | None:
    local = Path(sys.prefix) / "bin" / "ruff"
    for candidate in (os.environ.get("PSTOOL_RUFF"), str(local), shutil.which("ruff")):
        if candidate and Path(candidate).is_file():
            return candidate
    from pstool.paths import venv_dir

    venv = venv_dir() / "bin" / "ruff"
    return str(venv) if venv.is_file() else None


def _ruff_findings(ruff: str, root: Path) -> Counter[tuple[str, str, str]]:
    proc = subprocess.run(
        [ruff, "check", "--no-cache", "--config", str(RUFF_CONFIG), "--target-version", "py310",
         "--select", RUFF_SELECT, "--ignore", RUFF_IGNORE, "--output-format", "json", "--exit-zero", "."],
        cwd=root, capture_output=True, text=True, check=True,
    )
    return Counter(
        (Path(item["filename"]).resolve().relative_to(root.resolve()).as_posix(), item["code"] or "", item["message"])
        for item in json.loads(proc.stdout or "[]")
    )


def check_ruff(tree: Tree) -> list[Finding]:
    ruff = _ruff()
    if ruff is None:
        return [Finding("ruff", "tree", "ruff not found (install the venv: pstool install)")]
    changed = {
        path: status
        for path, status in tree.changed_paths().items()
        if path.endswith(".py") and status in "AM" and path not in GENERATED_PY
    }
    if not changed:
        return []
    findings = []
    with tempfile.TemporaryDirectory(prefix="pstool-ruff-") as tmp:
        before, after = Path(tmp) / "before", Path(tmp) / "after"
        for path, status in changed.items():
            for root, rev in ((after, "HEAD"), (before, tree.base_ref)):
                text = tree.show(rev, path)
                if text is None or (rev != "HEAD" and status == "A"):
                    continue
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_text(text)
        before.mkdir(exist_ok=True)
        new = _ruff_findings(ruff, after) - _ruff_findings(ruff, before)
        for (path, code, message), count in sorted(new.items()):
            findings.append(Finding("ruff", path, f"{code} {message}" + (f" (x{count})" if count > 1 else "")))
        added = [path for path, status in changed.items() if status == "A"]
        if added:
            proc = subprocess.run(
                [ruff, "format", "--no-cache", "--config", str(RUFF_CONFIG), "--check", "--output-format", "concise", *added],
                cwd=after, capture_output=True, text=True,
            )
            unformatted = {line.split(":", 1)[0] for line in proc.stdout.splitlines() if "would be reformatted" in line}
            for path in sorted(set(added) & unformatted):
                findings.append(Finding("ruff", path, "not ruff format-clean (ruff format would change it)"))
    return findings


CHECKS: dict[str, Callable[[Tree], list[Finding]]] = {
    "revision-heads-map": check_revision_heads_map,
    "ti-history-columns": check_ti_history_columns,
    "execution-api-versions": check_execution_api_versions,
    "cadwyn-response-defaults": check_cadwyn_response_defaults,
    "licence-header": check_licence_header,
    "config-options": check_config_options,
    "metrics-registry": check_metrics_registry,
    "newsfragments": check_newsfragments,
    "generated-in-patch": check_generated_in_patch,
    "operator-docs": check_operator_docs,
    "ruff": check_ruff,
}


def run_checks(path: Path, names: list[str] | None = None) -> list[Finding]:
    """Run the named checks (all by default) on the tree at ``path``; return every finding."""
    tree = Tree(path)
    findings: list[Finding] = []
    for name in names or list(CHECKS):
        findings += CHECKS[name](tree)
    return findings
