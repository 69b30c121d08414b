"""
Demo: a Dag failure callback that publishes an operational signal, which starts a cleanup Dag.

``AssetEventNotifier`` runs in the Dag processor like any Dag callback; the event's source is
the failed Dag run (no task). The templated idempotency key makes a re-delivered callback a
no-op. The cleanup Dag is scheduled on the signal asset like any asset-triggered Dag.

A Dag-level callback may emit only to assets the Dag declares, the outlets of its tasks
(``[core] asset_emit_authorization = declared``, the default): ``export`` declares the signal. An
outlet is also published when its task succeeds, so the asset is declared on the task whose failure
it reports.
"""

from __future__ import annotations

from airflow.sdk import Asset, dag, task
from airflow.sdk.definitions.asset.notifier import AssetEventNotifier

CLEANUP_NEEDED = Asset("demo_cleanup_needed")


@dag(
    schedule=None,
    tags=["asset-emit-demo"],
    on_failure_callback=AssetEventNotifier(
        CLEANUP_NEEDED,
        extra={"failed_dag": "{{ dag.dag_id }}", "failed_run": "{{ run_id }}"},
        idempotency_key="{{ run_id }}-cleanup",
    ),
)
def asset_emit_nightly_export():
    @task(outlets=[CLEANUP_NEEDED])
    def export():
        raise RuntimeError("export target unreachable")

    export()


@dag(schedule=CLEANUP_NEEDED, tags=["asset-emit-demo"])
def asset_emit_cleanup():
    @task
    def cleanup(triggering_asset_events=None):
        for events in triggering_asset_events.values():
            for event in events:
                print(f"cleaning up after {event.extra} (source run {event.source_run_id})")
        return [event.extra for events in triggering_asset_events.values() for event in events]

    cleanup()


asset_emit_nightly_export()
asset_emit_cleanup()
