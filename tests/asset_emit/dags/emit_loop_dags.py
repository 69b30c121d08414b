"""
Dags for loop protection ([core] asset_emit_max_chain_depth), test_emit_loop.py.

The loop: ``emit_loop_incident``'s task fails and its failure callback emits ``emit_loop_investigate``,
which triggers ``emit_loop_investigate``; that Dag's task fails too and its failure callback emits the
same asset again, and so on. Loop protection must stop it.

The legitimate chain: ``emit_chain_a`` emits ``emit_chain_ab`` -> ``emit_chain_b`` runs and emits
``emit_chain_bc`` -> ``emit_chain_c`` runs. The emitting tasks skip, so that no outlet event of a
success is mixed with the emitted ones; the failing ones never succeed.
"""

from __future__ import annotations

from airflow.sdk import DAG, Asset, task
from airflow.sdk.exceptions import AirflowSkipException

INVESTIGATE = Asset("emit_loop_investigate")
CHAIN_AB = Asset("emit_chain_ab")
CHAIN_BC = Asset("emit_chain_bc")


def _signal_investigate(context):
    """The task's failure callback: publish the operational signal."""
    INVESTIGATE.emit(
        idempotency_key=f"{context['run_id']}-investigate", extra={"failed_run": context["run_id"]}
    )


with DAG("emit_loop_incident", schedule=None):

    @task(retries=0, outlets=[INVESTIGATE], on_failure_callback=_signal_investigate)
    def incident():
        raise RuntimeError("the incident that starts the investigation")

    incident()


with DAG("emit_loop_investigate", schedule=[INVESTIGATE]):

    @task(retries=0, outlets=[INVESTIGATE], on_failure_callback=_signal_investigate)
    def investigate():
        raise RuntimeError("the investigation fails too, and signals investigate again")

    investigate()


with DAG("emit_chain_a", schedule=None):

    @task(outlets=[CHAIN_AB])
    def step_a(run_id=None):
        CHAIN_AB.emit(idempotency_key=f"{run_id}-ab")
        raise AirflowSkipException("emitted; publishes no outlet event")

    step_a()


with DAG("emit_chain_b", schedule=[CHAIN_AB]):

    @task(outlets=[CHAIN_BC])
    def step_b(run_id=None):
        CHAIN_BC.emit(idempotency_key=f"{run_id}-bc")
        raise AirflowSkipException("emitted; publishes no outlet event")

    step_b()


with DAG("emit_chain_c", schedule=[CHAIN_BC]):

    @task
    def step_c():
        return "the end of a legitimate chain"

    step_c()
