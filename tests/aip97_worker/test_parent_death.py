"""
The Task SDK's parent-death binding (``execution_time/parent_death.py``) with real processes.

A "supervisor" process forks a child that binds itself to it, as the supervisor's fork path does,
and the test SIGKILLs the supervisor: the child must be dead (not merely orphaned) at once. The race
where the supervisor dies before the child binds is created on purpose: the child must then kill
itself instead of running on.
"""

from __future__ import annotations

import pytest
from harness import run_isolated_script

pytestmark = pytest.mark.timeout(120)

SCRIPT = r"""
import json, os, signal, sys, tempfile, time
import psutil
from airflow.sdk.execution_time.parent_death import bind_to_supervisor, task_process_dies_with_supervisor

out_dir = tempfile.mkdtemp()


def gone(pid, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def run_supervisor(race: bool):
    # Returns (supervisor pid, child pid, path of the child's writes).
    path = os.path.join(out_dir, f"writes-{race}")
    r, w = os.pipe()
    sup = os.fork()
    if sup == 0:
        supervisor_pid = os.getpid()
        child = os.fork()
        if child == 0:
            if race:
                # Wait until the supervisor is gone, then bind: no parent-death signal can come now.
                while os.getppid() == supervisor_pid:
                    time.sleep(0.01)
            bind_to_supervisor(supervisor_pid)
            with open(path, "a") as f:
                f.write("bound\n")
            while True:  # "task code"
                with open(path, "a") as f:
                    f.write(f"{time.time()}\n")
                time.sleep(0.02)
        os.write(w, f"{child}\n".encode())
        if race:
            os._exit(0)
        time.sleep(60)
        os._exit(0)
    child = int(os.read(r, 64).decode())
    return sup, child, path


out = {"guarantee": task_process_dies_with_supervisor()}

sup, child, path = run_supervisor(race=False)
deadline = time.monotonic() + 10
while not (os.path.exists(path) and len(open(path).read().splitlines()) > 3) and time.monotonic() < deadline:
    time.sleep(0.02)
os.kill(sup, signal.SIGKILL)
os.waitpid(sup, 0)
killed_at = time.time()
out["child_gone_after_supervisor_sigkill"] = gone(child)
time.sleep(0.3)
writes = [float(x) for x in open(path).read().splitlines()[1:]]
out["writes_after_kill"] = sum(1 for t in writes if t > killed_at)
out["writes_before_kill"] = sum(1 for t in writes if t <= killed_at)

sup, child, path = run_supervisor(race=True)
os.waitpid(sup, 0)
out["race_child_gone"] = gone(child)
time.sleep(0.3)
out["race_child_ran_on"] = os.path.exists(path)
print(json.dumps(out))
"""


def test_task_process_dies_with_its_supervisor(tmp_path):
    out = run_isolated_script(SCRIPT, tmp_path)
    assert out["guarantee"] is True  # Linux
    assert out["writes_before_kill"] >= 3
    assert out["child_gone_after_supervisor_sigkill"] is True
    assert out["writes_after_kill"] == 0


def test_supervisor_dead_before_the_binding_kills_the_child(tmp_path):
    out = run_isolated_script(SCRIPT, tmp_path)
    assert out["race_child_gone"] is True
    assert out["race_child_ran_on"] is False, "the child ran task code after its supervisor was gone"
