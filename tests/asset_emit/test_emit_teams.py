"""Team boundary (multi-team on): a Dag may not emit for an asset that only other teams' Dags use."""

from __future__ import annotations

import uuid

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def teams_world(stack):
    """Two teams with one Dag each; an asset used only by the blue team's Dag (as an inlet)."""
    from airflow.models.asset import AssetActive, AssetModel, TaskInletAssetReference
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.team import Team
    from airflow.utils.session import create_session

    suffix = uuid.uuid4().hex[:6]
    names = {"red": f"red_{suffix}", "blue": f"blue_{suffix}"}
    with create_session() as session:
        for name in names.values():
            team = Team(name=name)
            bundle = DagBundleModel(name=f"bundle_{name}")
            bundle.teams.append(team)
            session.add_all([team, bundle])
            session.flush()
            session.add(DagModel(dag_id=f"dag_{name}", bundle_name=f"bundle_{name}", fileloc=f"/x/{name}.py"))
        asset = AssetModel(name=f"blue_asset_{suffix}", uri=f"blue_asset_{suffix}", group="asset", extra={})
        session.add(asset)
        session.flush()
        session.add(AssetActive.for_asset(asset))
        session.add(TaskInletAssetReference(asset_id=asset.id, dag_id=f"dag_{names['blue']}", task_id="t"))
    return names, f"blue_asset_{suffix}"


def test_team_boundary_is_enforced(stack, teams_world, monkeypatch):
    from airflow.assets.emission import AssetEmissionError, EmissionSource, emit_asset_event
    from airflow.utils.session import create_session

    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
    names, asset_name = teams_world
    before = len(stack.events(asset_name))
    with create_session() as session, pytest.raises(AssetEmissionError) as err:
        emit_asset_event(
            name=asset_name,
            uri=None,
            extra=None,
            partition_key=None,
            partition_date=None,
            idempotency_key=f"team-{uuid.uuid4()}",
            source=EmissionSource(dag_id=f"dag_{names['red']}", run_id="r1", task_id="t"),
            session=session,
        )
    assert (err.value.status_code, err.value.reason) == (403, "team_boundary")
    assert len(stack.events(asset_name)) == before

    with create_session() as session:
        result = emit_asset_event(
            name=asset_name,
            uri=None,
            extra={"team": "blue"},
            partition_key=None,
            partition_date=None,
            idempotency_key=f"team-{uuid.uuid4()}",
            source=EmissionSource(dag_id=f"dag_{names['blue']}", run_id="r1", task_id="t"),
            session=session,
        )
        assert result.deduplicated is False
    assert [e["source_dag_id"] for e in stack.events(asset_name)] == [f"dag_{names['blue']}"]
