"""
docs/operations.md says what the tests run: the same commands, the same messages, no untested claims.

The end-to-end tests run the commands (``test_rollback.py``, ``test_bad_input.py``,
``test_monitoring.py`` runs the REST block itself); this module checks, quickly, that the guide
quotes them exactly, and that the repository's docs make no MySQL claim (MySQL is not tested here).
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap

import pytest
from conftest import REPO, ROLLBACK_COMMAND, VANILLA_HEAD, docs_block
from test_bad_input import BAD_VALUES
from test_monitoring import RULE_TESTS, RULES

GUIDE = (REPO / "docs" / "operations.md").read_text()


@pytest.mark.parametrize("line", sorted(ROLLBACK_COMMAND))
def test_rollback_commands_are_the_tested_ones(line: str) -> None:
    assert f"airflow {' '.join(ROLLBACK_COMMAND[line])} -y" in GUIDE
    assert VANILLA_HEAD[line] in GUIDE or line == "3.3"
    assert "airflow db check-migrations --migration-wait-timeout 30" in GUIDE


def test_bad_input_messages_are_quoted() -> None:
    for _section, option, _value, message in BAD_VALUES:
        assert message in GUIDE, option


def test_promtool_commands_are_quoted() -> None:
    for path in (RULES, RULE_TESTS):
        assert path.relative_to(REPO).as_posix() in GUIDE


def test_mixed_version_warning_is_the_sdks() -> None:
    from airflow.sdk.api import client

    tree = ast.parse(textwrap.dedent(inspect.getsource(client.TaskInstanceOperations._patch_failed_state)))
    warnings = [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "warning"
    ]
    # Each warning the worker logs for an older api-server is quoted in the guide, word for word:
    # the failure fields unknown (AIP-97), and the cause oom unknown (the oom feature).
    quoted = re.findall(r"```\n\s*(The api-server does not know (?:the failure cause fields|this failure cause): .*?)\n", GUIDE)
    assert quoted
    assert sorted(warnings) == sorted(quoted)


def test_rest_block_is_marked_for_the_suite() -> None:
    assert "curl" in docs_block("rest-tries") and "jq" in docs_block("rest-tries")


def test_readme_links_the_guide() -> None:
    assert "](docs/operations.md)" in (REPO / "README.md").read_text()


def test_no_mysql_claims_in_the_docs() -> None:
    docs = [REPO / "README.md", *sorted((REPO / "AIP-docs").glob("*.md")), *sorted((REPO / "docs").glob("*.md"))]
    for path in docs:
        for number, text in enumerate(path.read_text().splitlines(), 1):
            if re.search("mysql", text, re.I):
                assert "not tested" in text, f"{path.relative_to(REPO)}:{number}: {text}"
