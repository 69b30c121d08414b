"""Map between wheel member paths and the upstream monorepo layout.

- core:      ``airflow/X``               <-> ``airflow-core/src/airflow/X``
- task-sdk:  ``airflow/sdk/X``           <-> ``task-sdk/src/airflow/sdk/X``
- shared:    ``airflow/_shared/L/X`` and ``airflow/sdk/_shared/L/X`` <-> ``shared/L/src/airflow_shared/L/X``
  (upstream keeps one copy and symlinks it into both distributions; the wheels ship it twice)
- providers: ``airflow/providers/P/X``   <-> ``providers/P/src/airflow/providers/P/X``
  where P is the provider id with dashes as slashes (``cncf-kubernetes`` -> ``cncf/kubernetes``)
"""

from __future__ import annotations

CORE = "apache-airflow-core"
SDK = "apache-airflow-task-sdk"
META = "apache-airflow"  # the meta-distribution ships metadata only
PROVIDER_PREFIX = "apache-airflow-providers-"

# The UI: its source lives in the tree (from the core sdist), the wheel ships only what
# `vite build` makes of it. pstool.ui builds that from the patched source.
UI_TREE_DIR = "airflow-core/src/airflow/ui/"
UI_DIST_MEMBER = "airflow/ui/dist/"
UI_CLIENT_DIR = UI_TREE_DIR + "openapi-gen/"

_SHARED_PARENT = {CORE: "airflow/_shared/", SDK: "airflow/sdk/_shared/"}


def provider_path(dist: str) -> str:
    """``apache-airflow-providers-cncf-kubernetes`` -> ``cncf/kubernetes``."""
    return dist[len(PROVIDER_PREFIX) :].replace("-", "/")


def wheel_to_tree(dist: str, member: str) -> str | None:
    """Tree path for one wheel member, or None for dist-info/metadata files."""
    if ".dist-info/" in member or dist == META:
        return None
    if dist == CORE and member.startswith(UI_DIST_MEMBER):
        return None  # built output; the tree holds the UI source (from the core sdist) instead
    if dist in _SHARED_PARENT:
        parent = _SHARED_PARENT[dist]
        if member.startswith(parent):
            rest = member[len(parent) :]
            if "/" in rest:  # airflow/_shared/__init__.py itself belongs to core
                lib = rest.split("/", 1)[0]
                return f"shared/{lib}/src/airflow_shared/{rest}"
    if dist == CORE:
        return f"airflow-core/src/{member}"
    if dist == SDK:
        return f"task-sdk/src/{member}"
    if dist.startswith(PROVIDER_PREFIX):
        return f"providers/{provider_path(dist)}/src/{member}"
    raise ValueError(f"no layout for {dist}")


def tree_to_wheels(path: str, dists: list[str]) -> list[tuple[str, str]]:
    """(dist, wheel member) pairs that a tree path lands in; empty for non-shipped files.

    A shared library path lands in both core and task-sdk.
    """
    if path.startswith("shared/"):
        parts = path.split("/")
        # shared/<lib>/src/airflow_shared/<lib>/...
        if len(parts) > 5 and parts[2] == "src" and parts[3] == "airflow_shared" and parts[1] == parts[4]:
            rest = "/".join(parts[4:])
            return [(CORE, f"airflow/_shared/{rest}"), (SDK, f"airflow/sdk/_shared/{rest}")]
        return []
    if path.startswith(UI_TREE_DIR):
        return []  # UI source: reaches the wheel only as the dist pstool.ui builds
    if path.startswith("airflow-core/src/airflow/"):
        return [(CORE, path[len("airflow-core/src/") :])]
    if path.startswith("task-sdk/src/airflow/sdk/"):
        return [(SDK, path[len("task-sdk/src/") :])]
    if path.startswith("providers/"):
        for dist in dists:
            if dist.startswith(PROVIDER_PREFIX):
                prefix = f"providers/{provider_path(dist)}/src/"
                if path.startswith(prefix):
                    return [(dist, path[len(prefix) :])]
    return []


def is_generated(path: str) -> bool:
    """Files upstream produces with a generator; a patch may only carry the generator's output."""
    return (
        "/ui/dist/" in path
        or path.startswith(UI_CLIENT_DIR)
        or path.endswith("-generated.yaml")
        or path.endswith("core_api/openapi/_private_ui.yaml")
        or path.endswith("sdk/api/datamodels/_generated.py")
        or path.endswith("sdk/execution_time/schema/schema.json")
        or path.endswith("airflow/git_version")
    )
