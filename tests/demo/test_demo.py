"""``make demo``: the runner brings the patched Airflow up, runs every example Dag and prints the
summary each feature promises, then stops everything it started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_demo_runs_the_examples_and_prints_the_summary() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "dev" / "demo.py"), "--exit", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=560,
        cwd=REPO,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "login: admin / admin" in out
    # AIP-97: one cause per way of failing.
    assert "raises       try 1: failed         cause=application" in out
    assert "times_out    try 1: failed         cause=timeout" in out
    assert "worker_lost  try 1: failed         cause=infra" in out
    # AIP-122 (on in the demo): the lost worker is retried without spending a retry.
    assert "lose_worker_once: success after 2 tries, infra_retry_count=1" in out
    # asset.emit(): five batches, five consumer runs, the failure signal starts the cleanup.
    for n in range(1, 6):
        assert f"partition_key=batch-000{n} success" in out
    assert "cleanup run asset_triggered" in out
    # Declared publication: a task emitting to an asset it does not declare is refused, nothing is written.
    assert "demo_batch_ready.emit(partition_key='batch-9999') refused: 403 asset_not_declared" in out
    assert (
        "refusal: Asset 'demo_batch_ready' is not declared by task 'inject_batch' of Dag 'asset_emit_undeclared'"
        in out
    )
    assert (
        "events of demo_batch_ready from asset_emit_undeclared: none; consumer runs for batch-9999: none"
        in out
    )
    # Out of memory (issue 37): the counter the supervisor reads, a SIGKILL that is not oom, a
    # MemoryError that is application; an OOM kill only where the worker has a memory limit of its own
    # (tests/image/test_oom_local_e2e.py runs the same Dag in a container with one).
    assert "memory cgroup the supervisor reads: /sys/fs/cgroup/" in out
    assert (
        "killed_by_sigkill       try 1: failed   cause=unknown     reason=Task process was killed by SIGKILL (9) "
        "before it reported a state. Not the kernel's OOM killer: the memory cgroup's oom_kill counter did not rise"
    ) in out
    assert "raises_memory_error     try 1: failed   cause=application reason=MemoryError: cannot" in out
    oom_shown = "allocate_past_the_limit try 1: failed   cause=oom         reason=OOM-killed: memory cgroup"
    assert "no OOM kill shown on this machine: " in out or oom_shown in out
    # Loop protection: the investigate loop stops at [core] asset_emit_max_chain_depth = 3.
    assert "asset_emit_loop_investigate runs: 3 (asset_triggered failed)" in out
    assert "demo_investigate event, chain depth 4 (incident -> investigate -> investigate -> investigate): " in out
    assert "triggered no Dag run: emit chain of 4 Dag runs is longer than [core] asset_emit_max_chain_depth (3)" in out
    # Nothing it started is left running.
    import psutil

    from lines import BUILD_DIR

    home = str(BUILD_DIR / "demo-home")
    left = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("AIRFLOW_HOME") == home:
                left.append(process.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    assert left == []
