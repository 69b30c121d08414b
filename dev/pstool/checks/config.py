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
"""``config-options``: every ``config.yml`` option the series adds is complete. See ``pstool.checks``."""

from __future__ import annotations

from pstool.checks.base import CONFIG_YML, Finding, Tree

CONFIG_OPTION_KEYS = ("description", "version_added", "type", "example", "default")
CONFIG_TYPES = {"string", "boolean", "integer", "float", "enum", "list"}


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
