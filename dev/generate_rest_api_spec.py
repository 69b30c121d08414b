"""Regenerate the REST API v2 OpenAPI spec the way upstream's in-container generator does.

Run with the interpreter of a venv holding the patched wheels; writes
``airflow-core/src/airflow/api_fastapi/core_api/openapi/v2-rest-api-generated.yaml`` under the
tree given as the only argument. Upstream builds the app with the simple auth manager, renders
``fastapi.openapi.utils.get_openapi`` over its routes and dumps it with PyYAML, block style, keys
in insertion order; this does the same.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SPEC = Path("airflow-core/src/airflow/api_fastapi/core_api/openapi/v2-rest-api-generated.yaml")


def render_spec() -> str:
    os.environ["AIRFLOW__CORE__AUTH_MANAGER"] = (
        "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
    )
    import yaml
    from fastapi.openapi.utils import get_openapi

    from airflow.api_fastapi.app import create_app

    app = create_app()
    schema = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        description=app.description,
        routes=app.routes,
    )
    return yaml.dump(schema, default_flow_style=False, sort_keys=False)


def main() -> int:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} TREE", file=sys.stderr)
        return 2
    target = Path(sys.argv[1]) / SPEC
    target.write_text(render_spec())
    from openapi_spec_validator import validate_spec
    import yaml

    validate_spec(yaml.safe_load(target.read_text()))
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
