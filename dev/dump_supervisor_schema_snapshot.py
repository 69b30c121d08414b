#!/usr/bin/env python
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
Print the Task SDK supervisor schema snapshot (``task-sdk/.../execution_time/schema/schema.json``).

Does what upstream's ``generate-supervisor-schemas-snapshot`` prek hook does (that script is not
part of a patch-set tree): one JSON schema document whose ``$defs`` hold every body registered in the supervisor
schema bundle (the ToTask/ToSupervisor and ToManager/ToDagProcessor unions, fed to pydantic in
class-name order), with the bundle's head version, indented by 2, with a trailing newline.

Run it with the Python of a venv holding the patched wheels:

    AIRFLOW_HOME=$(mktemp -d) /work/venvs/<name>/bin/python dev/dump_supervisor_schema_snapshot.py \
        > <tree>/task-sdk/src/airflow/sdk/execution_time/schema/schema.json

Check: with the pristine 3.3.2 wheels it reproduces the released schema.json byte for byte.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["_AIRFLOW__AS_LIBRARY"] = "1"

from pydantic import json_schema  # noqa: E402

from airflow.sdk.execution_time.schema import bundle, registered_models_by_name  # noqa: E402


def build_snapshot() -> str:
    """Return the snapshot text (without the trailing newline)."""
    registered = registered_models_by_name()
    # One schema document for all bodies; models go in sorted by class name so that the
    # output is stable across runs.
    _, combined = json_schema.models_json_schema(
        [(registered[name], "serialization") for name in sorted(registered)],
        schema_generator=json_schema.GenerateJsonSchema,
    )
    defs: dict = combined["$defs"]

    # Some SDK bodies still reference core models; pydantic then keys the same logical model
    # twice (once under a module-qualified key). Fold each such key into its title and point
    # the references at the folded name.
    aliases = {key: value["title"] for key, value in defs.items() if value.get("title", key) != key}
    for key, title in aliases.items():
        entry = defs.pop(key)
        defs.setdefault(title, entry)

    text = json.dumps(
        {
            "$schema": json_schema.GenerateJsonSchema.schema_dialect,
            "api_version": str(bundle.versions[0].value),
            "description": "Apache Airflow SDK Supervisor Schema",
            "$defs": defs,
        },
        indent=2,
    )
    for key, title in aliases.items():
        text = text.replace(f'"#/$defs/{key}"', f'"#/$defs/{title}"')
    return text


def main() -> None:
    sys.stdout.write(build_snapshot())
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
