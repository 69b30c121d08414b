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
"""``newsfragments``: the newsfragments a patch adds follow towncrier's rules. See ``pstool.checks``."""

from __future__ import annotations

import re

from pstool.checks.base import Finding, Tree

NEWSFRAGMENT_TYPES = {"significant", "feature", "improvement", "bugfix", "doc", "misc"}


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
