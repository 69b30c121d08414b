"""Demo summary for loop protection: the investigate loop of asset_emit_loop stops at the limit."""

from __future__ import annotations

from _common import run_finished

TITLE = "Loop protection: a failure-signal loop stops by itself (asset_emit_loop)"
FEATURES = ("asset-emit",)  # the demo shows this module on a line that carries these whole
DAG_IDS = ["asset_emit_loop_incident", "asset_emit_loop_investigate"]
UNPAUSE_ONLY = ["asset_emit_loop_investigate"]  # the consumer: started by the signal, not triggered
TRIGGER = ["asset_emit_loop_incident"]
TIMEOUT = 300
ASSET = "demo_investigate"


def _events():
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent.emit_chain, AssetEvent.emit_chain_stop_reason)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.name == ASSET)
            .order_by(AssetEvent.id)
            .all()
        )
    return [(list(chain or []), reason) for chain, reason in rows]


def _investigate_runs():
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return (
            session.query(DagRun.run_type, DagRun.state)
            .filter(DagRun.dag_id == "asset_emit_loop_investigate")
            .order_by(DagRun.id)
            .all()
        )


def finished() -> bool:
    events = _events()
    runs = _investigate_runs()
    return (
        run_finished("asset_emit_loop_incident")
        and any(reason for _, reason in events)
        and bool(runs)
        and all(state in ("success", "failed") for _, state in runs)
    )


def summarize() -> list[str]:
    from airflow.configuration import conf

    limit = conf.getint("core", "asset_emit_max_chain_depth")
    runs = _investigate_runs()
    lines = [f"[core] asset_emit_max_chain_depth = {limit}"]
    lines.append(
        f"asset_emit_loop_investigate runs: {len(runs)} "
        f"({', '.join(sorted({f'{t} {s}' for t, s in runs}))})"
    )
    for chain, reason in _events():
        path = " -> ".join(link["dag_id"].removeprefix("asset_emit_loop_") for link in chain)
        outcome = f"triggered no Dag run: {reason}" if reason else "triggered a run"
        lines.append(f"  {ASSET} event, chain depth {len(chain)} ({path}): {outcome}")
    return lines
