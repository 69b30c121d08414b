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
"""``licence-header``: every file a patch adds carries the full ASF licence header. See ``pstool.checks``."""

from __future__ import annotations

import re

from pstool.checks.base import Finding, Tree

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
