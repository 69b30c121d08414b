"""``make demo``: run the patched Airflow locally and show what each feature does.

Starts the api-server, scheduler, dag-processor and triggerer on SQLite with the LocalExecutor in
a fresh ``build/<line>/demo-home/``, loading ``examples/dags``. Prints the UI address and login, triggers the
example Dags named by each module in ``examples/summaries``, waits for them and prints each
module's summary. Then it keeps Airflow running for the UI until Ctrl-C (``--exit`` stops right
after the summary). Every process is started in its own process group and the whole group is
killed on exit, so nothing is left behind.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "dev"))
from pstool.paths import BUILD_DIR, LINE  # noqa: E402  (make demo LINE=3.4)

VENV_BIN = Path(sys.executable).parent
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


def free_port(preferred: int) -> int:
    for port in (preferred, 0) if preferred else (0,):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise RuntimeError("no free port")


def demo_env(home: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "examples" / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__CORE__PARALLELISM="8",
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(home / "passwords.json"),
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}",
        AIRFLOW__API_AUTH__JWT_SECRET="airflow-patchset-demo-secret",
        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
        AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="1",
        AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT="60",
        AIRFLOW__LOGGING__LOGGING_LEVEL="INFO",
        # The log servers of the scheduler's task processes and of the triggerer: upstream's ports
        # when free, so a second demo (another line's, or CI running both lines) can start beside it.
        AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port(8793)),
        AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port(8794)),
        # Workers wait up to 30 s for the api-server (upstream's 5 s), for a busy laptop or CI machine.
        AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT="30",
        PYTHONUNBUFFERED="1",
    )
    # Feature switches the demo shows (AIP-122 is off by default; the demo turns it on).
    env.update(AIRFLOW__CORE__MAX_INFRA_RETRIES="1", AIRFLOW__CORE__INFRA_RETRY_DELAY="2")
    # asset-emit loop protection: a small limit, so that asset_emit_loop's loop stops after 3 runs.
    env.update(AIRFLOW__CORE__ASSET_EMIT_MAX_CHAIN_DEPTH="3")
    return env


class Processes:
    """Airflow components, each in its own process group, all killed on exit."""

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        fh = log.open("wb")
        self.procs[name] = subprocess.Popen(
            args, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )

    def check(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"airflow {name} exited with {proc.returncode}; see build/{LINE}/demo-home/logs/{name}.log")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:  # the group: task supervisors and task processes too
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.procs.clear()


def summary_features(path: Path) -> tuple[str, ...]:
    """A summary module's ``FEATURES``, read without importing it (it may import their code)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FEATURES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise SystemExit(f"{path}: no FEATURES = (...) naming the features it shows")


def load_summaries() -> list[ModuleType]:
    """The summary modules whose features this release line carries whole (pstool.lines)."""
    from pstool.lines import missing

    sys.path.insert(0, str(REPO / "examples" / "summaries"))
    modules = []
    for path in sorted((REPO / "examples" / "summaries").glob("*.py")):
        if path.name.startswith("_"):
            continue
        reason = missing(summary_features(path))
        if reason:
            print(f"not shown on this line: {path.stem} ({reason})", flush=True)
            continue
        spec = importlib.util.spec_from_file_location(f"demo_summary_{path.stem}", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    return modules


def unpause(dag_id: str) -> None:
    """What ``airflow dags unpause`` does, in this process (which already has Airflow imported)."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(DagModel).filter(DagModel.dag_id == dag_id).update({DagModel.is_paused: False})


def trigger(dag_id: str) -> None:
    """What ``airflow dags trigger`` does (the local API client), in this process: no Airflow start-up
    per Dag."""
    import getpass

    from airflow.api.client import get_current_api_client

    get_current_api_client().trigger_dag(dag_id=dag_id, triggering_user_name=getpass.getuser())


def airflow(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run([str(VENV_BIN / "airflow"), *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"airflow {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return proc.stdout


def wait_for(predicate, timeout: float, what: str, procs: Processes) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs.check()
        if predicate():
            return
        time.sleep(1)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def print_failed_task_pages(port: int) -> None:
    """The UI pages that show each failed try's cause, reason and infra retries (AIP-97, AIP-122)."""
    from urllib.parse import quote

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.task_id, TaskInstance.failure_cause)
            .filter(TaskInstance.failure_cause.isnot(None))
            .filter(TaskInstance.state.in_(["failed", "up_for_retry"]))
            .order_by(TaskInstance.dag_id, TaskInstance.task_id)
            .all()
        )
    if not rows:
        return
    print("\nIn the UI, the Details tab of each failed task shows its cause, reason and infra retries:")
    for dag_id, run_id, task_id, cause in rows:
        url = f"http://127.0.0.1:{port}/dags/{dag_id}/runs/{quote(run_id)}/tasks/{task_id}/details"
        print(f"  {cause:<12} {url}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--exit", action="store_true", help="stop after printing the summary")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()

    home = BUILD_DIR / "demo-home"
    shutil.rmtree(home, ignore_errors=True)
    (home / "logs").mkdir(parents=True)
    port = free_port(args.port)
    env = demo_env(home, port)
    os.environ.update(env)  # for the ORM queries the summaries make in this process
    (home / "passwords.json").write_text(json.dumps({"admin": "admin"}))

    procs = Processes()

    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        print(f"airflow-patchset demo: migrating a fresh SQLite database in {home} ...", flush=True)
        airflow(env, "db", "migrate")
        for name in COMPONENTS:
            procs.start(name, [str(VENV_BIN / "airflow"), name], env, home / "logs" / f"{name}.log")
        print(f"UI:     http://127.0.0.1:{port}/   login: admin / admin", flush=True)
        print(f"logs:   {home / 'logs'}", flush=True)

        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session

        summaries = load_summaries()
        dag_ids = [d for module in summaries for d in module.DAG_IDS]

        def parsed() -> bool:
            with create_session() as session:
                found = {d for (d,) in session.query(DagModel.dag_id).filter(DagModel.dag_id.in_(dag_ids))}
            return found == set(dag_ids)

        wait_for(parsed, 180, f"the dag-processor to parse {', '.join(dag_ids)}", procs)
        for module in summaries:
            for dag_id in getattr(module, "UNPAUSE_ONLY", ()):
                unpause(dag_id)
            for dag_id in module.TRIGGER:
                unpause(dag_id)
                trigger(dag_id)
        print(f"triggered: {', '.join(t for m in summaries for t in m.TRIGGER)}", flush=True)
        for module in summaries:
            wait_for(module.finished, module.TIMEOUT, f"the {module.TITLE} Dags to finish", procs)
        print("\n=== what the example Dags showed ===")
        for module in summaries:
            print(f"\n{module.TITLE}")
            for line in module.summarize():
                print(f"  {line}")
        if not summaries:
            print("\n  (this line carries no feature whole yet: see lines/<line>/line.toml; Airflow itself runs)")
        if any("aip-97" in summary_features(Path(m.__file__)) for m in summaries):
            print_failed_task_pages(port)
        print(flush=True)
        if args.exit:
            return 0
        print("Airflow keeps running for the UI; press Ctrl-C to stop.", flush=True)
        while True:
            procs.check()
            time.sleep(2)
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    except RuntimeError as err:
        print(f"demo failed: {err}", file=sys.stderr)
        return 1
    finally:
        procs.stop()


if __name__ == "__main__":
    sys.exit(main())
