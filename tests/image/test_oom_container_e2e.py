"""A real OOM kill under a container memory limit, read by the supervisor's evidence (issue 37).

The patched image, run with ``--memory``: a process forked from the one that reads the memory
cgroup's OOM-kill counter (as the supervisor forks the task process) is OOM-killed by the kernel, and
the counter before and after makes it ``oom``, with the limit in the reason. Its negative control in
the same container: a child killed by ``kill -9`` leaves the counter alone and stays ``unknown``.
The process that reads the counter survives the kill, as the supervisor and the worker do. This runs
the reader (``airflow.sdk.execution_time.oom_evidence``) and the classification the supervisor uses;
the whole supervised-task path runs against fake counters in the in-patch tests and on a real stack
without an OOM kill in ``tests/aip97_worker``.
"""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SCRIPT = r"""
import json, os, signal
from airflow.sdk.execution_time.failure_classification import describe_process_exit
from airflow.sdk.execution_time.oom_evidence import OOMKillWatch, classify_process_exit, find_memory_cgroup

def run(kind):
    watch = OOMKillWatch.start()
    pid = os.fork()
    if pid == 0:
        if kind == "kill -9":
            os.kill(os.getpid(), signal.SIGKILL)
        chunks = []
        while True:  # about 1 GiB would be needed; the limit stops it first
            chunks.append(bytearray(32 << 20))
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    cause, reason = classify_process_exit(code, watch, describe_process_exit(code))
    return {"exit_code": code, "cause": cause.value, "reason": reason}

out = {"kill -9": run("kill -9"), "oom": run("oom"), "cgroup": str(find_memory_cgroup())}
print("RESULT " + json.dumps(out))
"""


def test_a_real_oom_kill_is_oom_and_kill_9_is_not(engine, patched, tmp_path):
    # In tmp_path: podman's conmon writes a file named ``oom`` into its working directory on an OOM kill.
    proc = engine.run(
        "run",
        "--rm",
        "--memory",
        "256m",
        "--memory-swap",
        "256m",
        "--env",
        "CONNECTION_CHECK_MAX_COUNT=0",
        patched,
        "python",
        "-c",
        SCRIPT,
        check=False,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    out = json.loads(line.removeprefix("RESULT "))

    kill9 = out["kill -9"]
    assert (kill9["exit_code"], kill9["cause"]) == (-9, "unknown"), out
    assert "Not the kernel's OOM killer: the memory cgroup's oom_kill counter did not rise" in kill9["reason"]

    oom = out["oom"]
    assert (oom["exit_code"], oom["cause"]) == (-9, "oom"), out
    assert oom["reason"].startswith("OOM-killed: memory cgroup limit 256 MiB (oom_kill "), out
    assert oom["reason"].endswith("Task process was killed by SIGKILL (9) before it reported a state."), out
