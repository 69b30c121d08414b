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
"""What every review check (``pstool.checks``) shares: the materialized tree it reads
(:class:`Tree`), a :class:`Finding`, and the upstream paths and rules the checks look at."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pstool.git import git, out

BASE_REF = "refs/patches/upstream-base"

CORE = "airflow-core/src/airflow"
EXEC_API = f"{CORE}/api_fastapi/execution_api"
SUPERVISOR_SCHEMA = "task-sdk/src/airflow/sdk/execution_time/schema/schema.json"
SUPERVISOR_SCHEMA_VERSIONS = "task-sdk/src/airflow/sdk/execution_time/schema/versions/"
CONFIG_YML = f"{CORE}/config_templates/config.yml"
METRICS_REGISTRY = "shared/observability/src/airflow_shared/observability/metrics/metrics_template.yaml"


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


def _schema_definitions(text: str | None) -> dict[str, object]:

    if not text:
        return {}
    data = json.loads(text)
    return data.get("$defs") or data.get("definitions") or {}
