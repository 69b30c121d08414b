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
Print the Task SDK supervisor schema snapshot (``execution_time/schema/schema.json``).

Stand-in for upstream's ``generate-supervisor-schemas-snapshot`` prek hook, which is not part of
the patch set's trees. It produces the same document: the serialization JSON Schema of every body
in ``registered_models_by_name()`` (sorted by class name), headed by the supervisor bundle's newest
version, with core/SDK duplicate model pairs merged under their title.

Run it with the Python of a venv that has the patched Task SDK installed::

    .venv/bin/python dev/dump_supervisor_schemas.py > \
        <tree>/task-sdk/src/airflow/sdk/execution_time/schema/schema.json

On pristine upstream-base it reproduces the released schema.json byte for byte.

``--typed-json-value``: file pydantic's ``JsonValue`` as the typed union of the six JSON types
instead of the empty schema ``{}`` that pydantic renders for it. Pydantic (2.12 to 2.14 alike)
gives ``{}`` (``JsonValue``'s JSON mode is ``any_schema()``), and the dump sees exactly one
``JsonValue`` entry (no core/SDK duplicate for the title merge to pick from). 3.3.2's released
snapshot has ``{}``; 3.4.0b2's has the typed union, which lang-SDK code generators can map to a
type (the same gap 3.4's Execution API closes for its own ``JsonValue`` component in
``execution_api/app.py``). So upstream's 3.4 snapshot step fills it in, and a line whose release
shows that passes this flag (``[generators] supervisor_typed_json_value`` in its ``line.toml``).
"""

from __future__ import annotations

import json
import os
import sys

os.environ["_AIRFLOW__AS_LIBRARY"] = "1"


#: ``JsonValue`` as 3.4.0b2's released snapshot files it (``--typed-json-value``).
TYPED_JSON_VALUE = {"title": "JsonValue", "type": ["object", "array", "string", "number", "boolean", "null"]}


def build_snapshot(*, typed_json_value: bool = False) -> str:
    """Return the snapshot document as text (without the trailing newline)."""
    from pydantic.json_schema import GenerateJsonSchema, models_json_schema

    from airflow.sdk.execution_time.schema import bundle, registered_models_by_name

    models = [(model, "serialization") for _, model in sorted(registered_models_by_name().items())]
    _, generated = models_json_schema(models, schema_generator=GenerateJsonSchema)
    defs = generated["$defs"]

    # A model defined in core and mirrored in the SDK shows up twice under mangled keys; keep one,
    # filed under its title, and point every reference at that name.
    renamed = {key: value["title"] for key, value in defs.items() if value.get("title", key) != key}
    for key, title in renamed.items():
        entry = defs.pop(key)
        defs.setdefault(title, entry)
    if typed_json_value and defs.get("JsonValue") == {}:
        defs["JsonValue"] = dict(TYPED_JSON_VALUE)

    document = {
        "$schema": GenerateJsonSchema.schema_dialect,
        "api_version": str(bundle.versions[0].value),
        "description": "Apache Airflow SDK Supervisor Schema",
        "$defs": defs,
    }
    text = json.dumps(document, indent=2)
    for old, new in renamed.items():
        text = text.replace(f'"#/$defs/{old}"', f'"#/$defs/{new}"')
    return text


if __name__ == "__main__":
    sys.stdout.write(build_snapshot(typed_json_value="--typed-json-value" in sys.argv[1:]) + "\n")
