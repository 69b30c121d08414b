#!/usr/bin/env bash
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
#
# Regenerate task-sdk/src/airflow/sdk/api/datamodels/_generated.py in a patch-set tree with
# upstream's own generator (task-sdk/dev/generate_task_sdk_models.py), then `ruff format` it as
# upstream's prek does.
#
# A patch-set tree lacks three things the upstream monorepo has, so this script adds them for the
# duration of the run and removes them afterwards (nothing is committed):
#   * airflow-core/src/airflow/_shared/<lib> symlinks to shared/<lib>/src/airflow_shared/<lib>
#   * scripts/ci/license-templates/LICENSE.txt (read by task-sdk/dev/datamodel_code_formatter.py)
#   * a root pyproject.toml carrying upstream's black/ruff formatter settings (line length 110,
#     isort sections), which task-sdk/pyproject.toml extends.
# Check: on pristine upstream-base this reproduces the released _generated.py byte for byte.
#
# Usage: dev/regen_task_sdk_models.sh <tree> <venv>
#   e.g. dev/regen_task_sdk_models.sh /work/wt/aip97sdk /work/venvs/aip97sdk
set -euo pipefail
TREE=$(cd "$1" && pwd)
VENV=$(cd "$2" && pwd)
export PATH="$VENV/bin:$PATH"

created=()
cleanup() {
    for p in "${created[@]}"; do rm -rf "$TREE/$p"; done
}
trap cleanup EXIT

for libdir in "$TREE"/shared/*/src/airflow_shared/*; do
    lib=$(basename "$libdir")
    link="airflow-core/src/airflow/_shared/$lib"
    if [[ ! -e "$TREE/$link" ]]; then
        ln -s "../../../../shared/$(basename "$(dirname "$(dirname "$(dirname "$libdir")")")")/src/airflow_shared/$lib" "$TREE/$link"
        created+=("$link")
    fi
done

if [[ ! -e "$TREE/scripts" ]]; then
    created+=("scripts")
    mkdir -p "$TREE/scripts/ci/license-templates"
    cat > "$TREE/scripts/ci/license-templates/LICENSE.txt" <<'LIC'
Licensed to the Apache Software Foundation (ASF) under one
or more contributor license agreements.  See the NOTICE file
distributed with this work for additional information
regarding copyright ownership.  The ASF licenses this file
to you under the Apache License, Version 2.0 (the
"License"); you may not use this file except in compliance
with the License.  You may obtain a copy of the License at

  http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing,
software distributed under the License is distributed on an
"AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
KIND, either express or implied.  See the License for the
specific language governing permissions and limitations
under the License.
LIC
fi

if [[ ! -e "$TREE/pyproject.toml" ]]; then
    created+=("pyproject.toml")
    cat > "$TREE/pyproject.toml" <<'TOML'
# Stand-in for upstream's root pyproject.toml: formatter settings only.
[tool.black]
line-length = 110

[tool.ruff]
line-length = 110

[tool.ruff.lint]
select = ["E4", "E7", "E9", "F"]
extend-select = ["I", "UP", "ISC", "TC", "E", "W", "RUF100", "D1", "D2", "D213", "D3", "D400", "D401", "D402", "D403", "D412", "D419"]
ignore = ["D100", "D102", "D103", "D104", "D105", "D107", "D203", "D212", "E731", "TC003", "W191", "E111", "E114", "E117", "D206", "D300", "E501"]

[tool.ruff.format]
docstring-code-format = true

[tool.ruff.lint.isort]
required-imports = ["from __future__ import annotations"]
combine-as-imports = true
section-order = ["future", "standard-library", "third-party", "first-party", "local-folder", "testing"]
known-first-party = ["airflow", "airflow_shared", "airflow_shared.*"]

[tool.ruff.lint.isort.sections]
testing = ["dev", "providers.tests", "tests_common", "tests", "system", "unit", "integration"]
TOML
fi

cd "$TREE/task-sdk"
python -W ignore dev/generate_task_sdk_models.py
ruff format --quiet src/airflow/sdk/api/datamodels/_generated.py
grep -n '^API_VERSION' src/airflow/sdk/api/datamodels/_generated.py
