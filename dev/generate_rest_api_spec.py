"""Regenerate the REST API v2 OpenAPI spec the way upstream's in-container generator does.

Run with the interpreter of a venv holding the patched wheels; writes
``airflow-core/src/airflow/api_fastapi/core_api/openapi/v2-rest-api-generated.yaml`` under the
tree given as the only argument, and the UI's ``_private_ui.yaml`` next to it (upstream generates
it in the same script; the UI's TypeScript client is generated from it). Upstream builds the app
with the simple auth manager, renders ``fastapi.openapi.utils.get_openapi`` over its routes (for
the UI spec: only the ``/ui/`` routes) and dumps it with PyYAML, block style, keys in insertion
order; this does the same. On pristine 3.3.2 both files come out byte for byte as released.
Each spec written is then validated as an OpenAPI document (``pstool regenerate`` and the full
series' check); ``--no-validate`` skips that (some 11 s) where the check is only that the committed
bytes are what the generator makes: pristine upstream, and each feature alone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SPEC = Path("airflow-core/src/airflow/api_fastapi/core_api/openapi/v2-rest-api-generated.yaml")
UI_SPEC = SPEC.parent / "_private_ui.yaml"


def render_spec(only_ui: bool = False) -> str:
    os.environ["AIRFLOW__CORE__AUTH_MANAGER"] = (
        "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
    )
    import yaml
    from fastapi.openapi.utils import get_openapi
    from fastapi.routing import APIRoute

    from airflow.api_fastapi.app import create_app

    app = create_app()
    if only_ui:
        for route in app.routes:
            if isinstance(route, APIRoute):
                route.include_in_schema = route.path.startswith("/ui/")
    schema = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        description=app.description,
        routes=app.routes,
    )
    return yaml.dump(schema, default_flow_style=False, sort_keys=False)


def main() -> int:
    args = sys.argv[1:]
    validate = "--no-validate" not in args
    args = [a for a in args if a != "--no-validate"]
    if len(args) != 1:
        print(f"usage: {sys.argv[0]} [--no-validate] TREE", file=sys.stderr)
        return 2
    from openapi_spec_validator import validate_spec
    import yaml

    for spec, only_ui in ((SPEC, False), (UI_SPEC, True)):
        target = Path(args[0]) / spec
        target.write_text(render_spec(only_ui=only_ui))
        if validate:
            validate_spec(yaml.load(target.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
