"""
Demo: a feedback loop of emitted asset events stops by itself (loop protection).

``asset_emit_loop_incident``'s task fails and its failure callback emits ``demo_investigate``, which
starts ``asset_emit_loop_investigate``. That Dag fails too, and its failure callback emits
``demo_investigate`` again: without protection the runs would go on forever. Every emitted event
carries its emit chain (the Dag runs that led to it); the event whose chain is longer than ``[core]
asset_emit_max_chain_depth`` (3 in the demo, 16 by default) is recorded but triggers no Dag run,
and says why.

The failing tasks declare the signal in their ``outlets`` (a callback may emit only to what its task
declares); they never succeed, so the outlet itself is never published.
"""

from __future__ import annotations

from airflow.sdk import Asset, dag, task

INVESTIGATE = Asset("demo_investigate")


def signal_investigate(context):
    """The task's failure callback: publish the operational signal, once per failed run."""
    INVESTIGATE.emit(idempotency_key=f"{context['run_id']}-investigate", extra={"failed_run": context["run_id"]})


@dag(schedule=None, tags=["asset-emit-demo"])
def asset_emit_loop_incident():
    @task(retries=0, outlets=[INVESTIGATE], on_failure_callback=signal_investigate)
    def incident():
        raise RuntimeError("disk full on the ingestion host")

    incident()


@dag(schedule=INVESTIGATE, tags=["asset-emit-demo"])
def asset_emit_loop_investigate():
    @task(retries=0, outlets=[INVESTIGATE], on_failure_callback=signal_investigate)
    def investigate():
        raise RuntimeError("the investigation fails too (same disk), and signals investigate again")

    investigate()


asset_emit_loop_incident()
asset_emit_loop_investigate()
