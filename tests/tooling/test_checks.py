"""Each of upstream's review checks (``pstool check``) passes on pristine 3.3.2 and fails on a patch
that breaks its rule, naming the check and the offending file or patch.

Every test commits one deliberately broken patch on a pristine tree (real git, the real pinned
upstream files) and runs the real ``pstool check`` command on it.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.line_independent  # pstool itself, on the default line's pristine base

CORE = "airflow-core/src/airflow"
LICENCE = """\
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
"""


@pytest.fixture
def pristine(pstool: Any) -> Any:
    pstool.run("checkout")
    return pstool


def add_file(pstool: Any, path: str, text: str, subject: str) -> None:
    target = pstool.tree / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    pstool.git("add", path)
    pstool.git("commit", "-q", "-m", f"{subject}\n\nWhy.\n\nFeature: t\nUpstream-Status: Pending (test)\nDepends: none\n")


def check(pstool: Any, name: str) -> tuple[int, str]:
    proc = pstool.run("check", "--tree", str(pstool.tree), "--only", name, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_every_check_passes_on_pristine_upstream(pristine: Any) -> None:
    proc = pristine.run("check", "--tree", str(pristine.tree), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 finding(s)" in proc.stdout


def test_a_migration_without_its_heads_map_entry_fails(pristine: Any) -> None:
    add_file(
        pristine,
        f"{CORE}/migrations/versions/0124_3_4_0_add_thing.py",
        LICENCE + '"""Add a thing."""\n\nrevision = "aaaabbbbcccc"\ndown_revision = "d2f4e1b3c5a7"\n'
        'branch_labels = None\ndepends_on = None\nairflow_version = "3.4.0"\n',
        "Add a migration",
    )
    rc, output = check(pristine, "revision-heads-map")
    assert rc == 1
    assert "[revision-heads-map]" in output and "'3.4.0'" in output and "aaaabbbbcccc" in output


def test_two_migrations_revising_one_head_fork_the_chain(pristine: Any) -> None:
    for rev, slug in (("aaaabbbbcccc", "one"), ("ddddeeeeffff", "two")):
        add_file(
            pristine,
            f"{CORE}/migrations/versions/0124_3_4_0_{slug}.py",
            LICENCE + f'revision = "{rev}"\ndown_revision = "d2f4e1b3c5a7"\nairflow_version = "3.3.0"\n',
            f"Add migration {slug}",
        )
    rc, output = check(pristine, "revision-heads-map")
    assert rc == 1 and "the chain forks" in output


def test_a_task_instance_column_missing_from_history_fails(pristine: Any) -> None:
    pristine.commit(
        f"{CORE}/models/taskinstance.py",
        lambda t: t.replace(
            "    retry_reason: Mapped[",
            "    sneaky_column: Mapped[str | None] = mapped_column(String(20), nullable=True)\n    retry_reason: Mapped[",
            1,
        ),
        "Add a column to the task instance only",
        "t",
    )
    rc, output = check(pristine, "ti-history-columns")
    assert rc == 1 and "TaskInstance.sneaky_column" in output


def test_an_execution_api_datamodel_change_without_a_version_change_fails(pristine: Any) -> None:
    pristine.commit(
        f"{CORE}/api_fastapi/execution_api/datamodels/taskinstance.py",
        lambda t: t.replace(
            "class TIRetryStatePayload(StrictBaseModel):\n",
            "class TIRetryStatePayload(StrictBaseModel):\n    new_field: str | None = None\n",
            1,
        ),
        "Add a field to the retry payload",
        "t",
    )
    rc, output = check(pristine, "execution-api-versions")
    assert rc == 1
    assert "Add a field to the retry payload" in output and "datamodels/taskinstance.py" in output


def test_a_changed_supervisor_schema_body_without_a_schema_version_fails(pristine: Any) -> None:
    path = "task-sdk/src/airflow/sdk/execution_time/schema/schema.json"

    def retitle(text: str) -> str:
        import json

        data = json.loads(text)
        defs = data.get("$defs") or data["definitions"]
        first = min(defs)
        defs[first]["description"] = "changed by a patch"
        return json.dumps(data, indent=2) + "\n"

    pristine.commit(path, retitle, "Change a supervisor message", "t")
    rc, output = check(pristine, "execution-api-versions")
    assert rc == 1 and "existing supervisor schema bodies" in output


def test_a_stripped_response_field_without_a_default_fails(pristine: Any) -> None:
    pristine.commit(
        f"{CORE}/api_fastapi/execution_api/datamodels/taskinstance.py",
        lambda t: t.replace(
            "class TIRunContext(BaseModel):\n", "class TIRunContext(BaseModel):\n    required_new: str\n", 1
        ),
        "Add a required field to the run context",
        "t",
    )
    add_file(
        pristine,
        f"{CORE}/api_fastapi/execution_api/versions/v2026_11_30.py",
        LICENCE
        + "from cadwyn import ResponseInfo, VersionChange, convert_response_to_previous_version_for, schema\n\n"
        "from airflow.api_fastapi.execution_api.datamodels.taskinstance import TIRunContext\n\n\n"
        "class AddRequiredNew(VersionChange):\n"
        '    """Add required_new."""\n\n'
        '    description = __doc__\n'
        '    instructions_to_migrate_to_previous_version = (schema(TIRunContext).field("required_new").didnt_exist,)\n\n'
        "    @convert_response_to_previous_version_for(TIRunContext)  # type: ignore[arg-type]\n"
        "    def drop(response: ResponseInfo) -> None:  # type: ignore[misc]\n"
        '        response.body.pop("required_new", None)\n',
        "Version the required field",
    )
    rc, output = check(pristine, "cadwyn-response-defaults")
    assert rc == 1 and "TIRunContext.required_new" in output and "AddRequiredNew" in output


def test_a_new_file_with_a_truncated_licence_header_fails(pristine: Any) -> None:
    truncated = "\n".join(LICENCE.splitlines()[:-1]) + '\n"""A module."""\n'
    add_file(pristine, "task-sdk/src/airflow/sdk/execution_time/new_module.py", truncated, "Add a module")
    rc, output = check(pristine, "licence-header")
    assert rc == 1 and "new_module.py" in output and "under the License." in output


def test_a_new_lint_finding_fails_and_an_upstream_one_does_not(pristine: Any) -> None:
    # An unused import added to an upstream file is a new finding; what the pristine file already
    # had (if anything) is not reported.
    pristine.commit(
        f"{CORE}/utils/state.py",
        lambda t: t.replace("from __future__ import annotations\n", "from __future__ import annotations\n\nimport os\n", 1),
        "Import os for nothing",
        "t",
    )
    rc, output = check(pristine, "ruff")
    assert rc == 1, output
    assert f"[ruff] {CORE}/utils/state.py: F401" in output
    assert all(line.startswith(f"[ruff] {CORE}/utils/state.py: ") for line in output.splitlines() if "[ruff]" in line)


def test_a_new_file_with_unsorted_imports_or_unformatted_code_fails(pristine: Any) -> None:
    add_file(
        pristine,
        f"{CORE}/models/lint_probe.py",
        LICENCE + "from __future__ import annotations\n\nfrom sqlalchemy import update\nfrom airflow.utils.state import State\n\n"
        "X = [update,State]\n",
        "Add a module that upstream's ruff would reject",
    )
    rc, output = check(pristine, "ruff")
    assert rc == 1, output
    assert f"[ruff] {CORE}/models/lint_probe.py: I001" in output
    assert f"[ruff] {CORE}/models/lint_probe.py: not ruff format-clean" in output


def test_an_incomplete_config_option_fails(pristine: Any) -> None:
    pristine.commit(
        f"{CORE}/config_templates/config.yml",
        lambda t: t.replace(
            "    default_task_retries:\n",
            "    half_done_option:\n      description: |\n        Half done.\n      type: integer\n"
            "      version_added: ~\n      default: \"1\"\n    default_task_retries:\n",
            1,
        ),
        "Add an option",
        "t",
    )
    rc, output = check(pristine, "config-options")
    assert rc == 1 and "half_done_option" in output and "lacks example" in output and "version_added" in output


def test_an_unregistered_metric_fails(pristine: Any) -> None:
    pristine.commit(
        f"{CORE}/executors/base_executor.py",
        lambda t: t.replace(
            "    def fail(self, key", '    def _count(self):\n        stats.incr("executor.never_registered")\n\n    def fail(self, key', 1
        ),
        "Count something",
        "t",
    )
    rc, output = check(pristine, "metrics-registry")
    assert rc == 1 and "executor.never_registered" in output


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("thing.significant.rst", "Do a thing.\n", "'* Types of change'"),
        ("thing.significant.rst", "Do a thing.\n\n* Types of change\n\n  * [ ] Dag changes\n\n* Migration rules needed\n", "ticks no box"),
        ("thing.feature.txt", "Do a thing.\n", "<id>.<type>.rst"),
        ("thing.breaking.rst", "Do a thing.\n", "<id>.<type>.rst"),
    ],
)
def test_a_malformed_newsfragment_fails(pristine: Any, name: str, text: str, expected: str) -> None:
    add_file(pristine, f"airflow-core/newsfragments/{name}", text, "Add a newsfragment")
    rc, output = check(pristine, "newsfragments")
    assert rc == 1 and expected in output


def test_a_complete_significant_newsfragment_passes(pristine: Any) -> None:
    add_file(
        pristine,
        "airflow-core/newsfragments/thing.significant.rst",
        "Do a thing.\n\n* Types of change\n\n  * [x] Behaviour changes\n\n* Migration rules needed\n\n  * None\n",
        "Add a newsfragment",
    )
    rc, output = check(pristine, "newsfragments")
    assert rc == 0, output


def test_verify_fails_on_a_series_that_breaks_a_review_check(pristine: Any) -> None:
    add_file(pristine, "airflow-core/newsfragments/thing.significant.rst", "Do a thing.\n", "Add a newsfragment")
    pristine.run("export")
    proc = pristine.run("verify", "--no-generated", check=False)
    assert proc.returncode == 1
    assert "upstream's review checks fail on the whole series" in proc.stderr
    assert "'* Types of change'" in proc.stderr


def _edit_and_commit(pstool: Any, edits: dict[str, tuple[str, str]], subject: str) -> None:
    for path, (old, new) in edits.items():
        target = pstool.tree / path
        text = target.read_text()
        assert old in text, f"{old!r} not in {path}"
        target.write_text(text.replace(old, new, 1))
        pstool.git("add", path)
    pstool.git("commit", "-q", "-m", f"{subject}\n\nWhy.\n\nFeature: t\nUpstream-Status: Pending (test)\nDepends: none\n")


CALLBACKS = f"{CORE}/callbacks/callback_requests.py"
SCHEMA_JSON = "task-sdk/src/airflow/sdk/execution_time/schema/schema.json"
TASK_CALLBACK_FIELD = '    task_callback_type: TaskInstanceState | None = None\n'


def test_a_model_change_regenerated_only_in_a_later_patch_fails(pristine: Any) -> None:
    # aip-97 0003 did this: TaskCallbackRequest gained a field, schema.json was regenerated in 0005.
    text = (pristine.tree / CALLBACKS).read_text()
    assert TASK_CALLBACK_FIELD in text
    _edit_and_commit(pristine, {CALLBACKS: (TASK_CALLBACK_FIELD, TASK_CALLBACK_FIELD + "    marker: str | None = None\n")},
                     "Add a field to TaskCallbackRequest")
    _edit_and_commit(pristine, {SCHEMA_JSON: ('"task_callback_type": {', '"marker": {"default": null},\n        "task_callback_type": {')},
                     "Regenerate the supervisor schema later")
    rc, output = check(pristine, "generated-in-patch")
    assert rc == 1
    assert "[generated-in-patch] Add a field to TaskCallbackRequest" in output and "TaskCallbackRequest" in output
    assert "Regenerate the supervisor schema later" not in output


def test_a_model_change_with_its_regenerated_file_in_the_same_patch_passes(pristine: Any) -> None:
    _edit_and_commit(
        pristine,
        {
            CALLBACKS: (TASK_CALLBACK_FIELD, TASK_CALLBACK_FIELD + "    marker: str | None = None\n"),
            SCHEMA_JSON: ('"task_callback_type": {', '"marker": {"default": null},\n        "task_callback_type": {'),
        },
        "Add a field to TaskCallbackRequest and regenerate",
    )
    rc, output = check(pristine, "generated-in-patch")
    assert rc == 0, output
