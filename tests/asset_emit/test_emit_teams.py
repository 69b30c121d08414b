"""
Team boundary (multi-team on), through the real route with a real task's token.

A second api-server with ``[core] multi_team = True`` runs on the stack's database. The test
Dags' bundle belongs to team "red"; a Dag of team "blue" uses some assets. A red task may not
emit for an asset that blue uses, whether it addresses it by name or by URI and even though
its own Dag declares it as an inlet; it may when blue's consumer allows red as a producer,
and for assets only red uses. Nothing is written when it is refused.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from conftest import EXECUTION_API_VERSION
from harness import free_port, http_ok

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

TEAM_ASSET = ("emit_test_team_asset", "emit-test://team/asset")  # an inlet of emit_test_seed (red)
RED_ONLY = "emit_test_api_target"


@pytest.fixture(scope="module")
def teams_world(stack):
    """Team red owns the test Dags' bundle; team blue has one Dag using three assets."""
    from sqlalchemy import delete, select

    from airflow.models.asset import (
        AssetActive,
        AssetModel,
        DagScheduleAssetReference,
        TaskInletAssetReference,
    )
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.team import Team
    from airflow.utils.session import create_session

    suffix = uuid.uuid4().hex[:6]
    red, blue = f"red_{suffix}", f"blue_{suffix}"
    blue_dag = f"dag_{blue}"
    with create_session() as session:
        red_team, blue_team = Team(name=red), Team(name=blue)
        session.add_all([red_team, blue_team])
        test_bundle = session.scalar(
            select(DagBundleModel)
            .join(DagModel, DagModel.bundle_name == DagBundleModel.name)
            .where(DagModel.dag_id == "emit_test_seed")
        )
        test_bundle.teams.append(red_team)
        blue_bundle = DagBundleModel(name=f"bundle_{blue}")
        blue_bundle.teams.append(blue_team)
        session.add(blue_bundle)
        session.flush()
        session.add(DagModel(dag_id=blue_dag, bundle_name=blue_bundle.name, fileloc=f"/x/{blue}.py"))
        assets = {}
        for name in (f"blue_only_{suffix}", f"blue_allows_red_{suffix}"):
            asset = AssetModel(name=name, uri=f"emit-test://{name}", group="asset", extra={})
            session.add(asset)
            session.flush()
            session.add(AssetActive.for_asset(asset))
            assets[name] = asset.id
        team_asset_id = session.scalar(select(AssetModel.id).where(AssetModel.name == TEAM_ASSET[0]))
        session.flush()
        session.add_all(
            [
                TaskInletAssetReference(asset_id=team_asset_id, dag_id=blue_dag, task_id="t"),
                DagScheduleAssetReference(asset_id=assets[f"blue_only_{suffix}"], dag_id=blue_dag),
                DagScheduleAssetReference(
                    asset_id=assets[f"blue_allows_red_{suffix}"], dag_id=blue_dag, allow_producer_teams=[red]
                ),
            ]
        )
        bundle_name = test_bundle.name
    yield {"suffix": suffix, "red": red, "blue": blue}
    with create_session() as session:
        bundle = session.get(DagBundleModel, bundle_name)
        bundle.teams = [t for t in bundle.teams if t.name != red]
        session.execute(delete(TaskInletAssetReference).where(TaskInletAssetReference.dag_id == blue_dag))


@pytest.fixture(scope="module")
def team_api(stack, teams_world):
    """A second api-server with multi-team on, on the stack's database (its own configuration)."""
    port = free_port()
    stack.start_component(
        "api-server",
        name="api-server-teams",
        # Every producer may emit to every asset here, so that only the team boundary decides: it
        # holds whatever [core] asset_emit_authorization says (test_emit_authorization.py checks
        # declared publication, the stack's default).
        config={
            "AIRFLOW__CORE__MULTI_TEAM": "True",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__CORE__ASSET_EMIT_AUTHORIZATION": "any",
        },
    )
    url = f"http://127.0.0.1:{port}"
    try:
        stack.wait_for(
            lambda: http_ok(f"{url}/api/v2/monitor/health"),
            timeout=90,
            what="the multi-team api-server",
            logs=("api-server-teams",),
        )
        yield url
    finally:
        stack.stop("api-server-teams")


def _emit(url: str, token: str, body: dict) -> httpx.Response:
    return httpx.post(
        f"{url}/execution/asset-events",
        json={"idempotency_key": f"team-{uuid.uuid4()}", **body},
        headers={"Authorization": f"Bearer {token}", "Airflow-API-Version": EXECUTION_API_VERSION},
        # The first request to the fresh api-server can take 20 s and more on a loaded machine.
        timeout=90,
    )


def test_team_boundary_through_the_route(stack, seed_ti, teams_world, team_api):
    token = stack.token_for(seed_ti["id"])  # emit_test_seed, team red
    suffix = teams_world["suffix"]
    refused = [
        {"name": TEAM_ASSET[0]},  # the red Dag declares it as an inlet, blue uses it too
        {"uri": TEAM_ASSET[1]},
        {"name": TEAM_ASSET[0], "uri": TEAM_ASSET[1]},
        {"name": f"blue_only_{suffix}"},
        {"uri": f"emit-test://blue_only_{suffix}"},
    ]
    for body in refused:
        before = len(stack.events(body.get("name") or TEAM_ASSET[0]))
        resp = _emit(team_api, token, body)
        assert resp.status_code == 403, (body, resp.text)
        assert resp.json()["detail"]["reason"] == "team_boundary", body
        assert teamsafe(resp.json()["detail"]["message"], teams_world)
        assert len(stack.events(body.get("name") or TEAM_ASSET[0])) == before, body
    assert stack.events(f"blue_only_{suffix}") == []
    assert stack.events(TEAM_ASSET[0]) == []

    allowed = _emit(team_api, token, {"name": f"blue_allows_red_{suffix}"})
    assert allowed.status_code == 201, allowed.text
    own = _emit(team_api, token, {"name": RED_ONLY})
    assert own.status_code == 201, own.text
    assert own.json()["source_dag_id"] == "emit_test_seed"

    # The same requests on the stack's own api-server (multi-team off) are not team-checked.
    assert _emit(stack.api_url, token, {"name": TEAM_ASSET[0]}).status_code == 201


def teamsafe(message: str, world: dict) -> bool:
    """The refusal names the emitting team and the other team, so the user can act on it."""
    return world["red"] in message and world["blue"] in message
