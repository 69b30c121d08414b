"""Airflow run from an image the way a deployment runs it: one container per component.

Used by tests/image and benchmarks/celery_worker_restart_containers.py. Every container runs with
``--network=host`` (no container network is needed: PostgreSQL is the host's, from .ci/services.sh,
and the broker a ``redis-server`` the caller runs on the host, ``harness.private_redis``), the engine
flags of ``pstool.image.Engine`` (runc and the machine's ulimits on podman), and the environment of
the deployment; each has its own name (a per-deployment prefix) and label, and
:meth:`Deployment.remove` (also on ``__exit__``) removes every container it created.
The host network is shared, so every port is the deployment's own: the api-server's, and the log
servers of the triggerer and of each worker.

Typical use::

    with Deployment(engine, "airflow-patchset:3.3.2-ps.1", env, dags=..., home=tmp) as dep:
        dep.migrate()
        for component in ("api-server", "scheduler", "dag-processor", "triggerer"):
            dep.start(component)
        dep.start_worker("worker-1")
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Self

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))
sys.path.insert(0, str(REPO / "tests"))

from harness import free_port, read_jsonl, wait_for  # noqa: E402
from pstool.image import Engine  # noqa: E402

#: Container paths of the host directories a deployment mounts.
DAGS, LOGS, OUT = "/opt/airflow/dags", "/opt/airflow/logs", "/out"


class Deployment:
    """Containers of one Airflow deployment, sharing a database, a broker, Dags and logs."""

    def __init__(
        self,
        engine: Engine,
        image: str,
        env: dict[str, str],
        *,
        home: Path,
        dags: list[Path],
        name: str = "",
    ) -> None:
        self.engine, self.image = engine, image
        self.name = name or f"aps-{uuid.uuid4().hex[:8]}"
        self.home = Path(home)
        self.api_port = free_port()
        self.dir = {"dags": self.home / "dags", "logs": self.home / "logs", "out": self.home / "out"}
        for path in self.dir.values():
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)  # the containers run as uid 50000
        for dag in dags:
            shutil.copy(dag, self.dir["dags"])
        self.env = {
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.api_port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": f"{self.name}-{uuid.uuid4().hex}",
            # A worker's Execution API calls wait up to 30 s (upstream's 5 s), as tests/harness.py's: on a
            # loaded 2-core machine a slow api-server answer is load, not what a test or benchmark is about.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
            # The official entrypoint's `airflow db check` before each component: the database is
            # up before anything starts here; a worker's own start keeps it (see start_worker).
            "CONNECTION_CHECK_MAX_COUNT": "0",
            **env,
        }
        self.containers: list[str] = []

    # --- containers -----------------------------------------------------------------------------
    def _run_args(
        self, component: str, hostname: str | None, env: dict[str, str], memory: str | None = None
    ) -> list[str]:
        args = [
            "--network=host",
            "--label",
            f"org.airflow-patchset.deployment={self.name}",
            "--volume",
            f"{self.dir['dags']}:{DAGS}:ro",
            "--volume",
            f"{self.dir['logs']}:{LOGS}",
            "--volume",
            f"{self.dir['out']}:{OUT}",
        ]
        if hostname:
            args += ["--hostname", hostname]
        if memory:
            # The container's memory limit, with no swap above it (the kernel OOM-kills at the limit).
            args += ["--memory", memory, "--memory-swap", memory]
        for key, value in {**self.env, **env}.items():
            args += ["--env", f"{key}={value}"]
        return args

    def container(self, component: str) -> str:
        return f"{self.name}-{component}"

    def run(self, *command: str, timeout: float = 300, env: dict[str, str] | None = None) -> str:
        """Run one Airflow command in a fresh container to completion; its output."""
        proc = self.engine.run("run", "--rm", *self._run_args("cli", None, env or {}), self.image, *command,
                               check=False, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc.stdout

    def migrate(self) -> None:
        self.run("db", "migrate", timeout=600)

    def start(
        self,
        component: str,
        *command: str,
        hostname: str | None = None,
        env: dict[str, str] | None = None,
        memory: str | None = None,
    ) -> str:
        """Start ``airflow <command or component>`` detached in a container named after the component.

        ``memory`` is the container's memory limit (``--memory``, e.g. ``512m``), swap included.
        """
        name = self.container(component)
        # In the deployment's home: the container's monitor (podman's conmon) writes a file named
        # ``oom`` into its working directory when the kernel OOM-kills a process in the container.
        self.engine.run(
            "run", "--detach", "--name", name, *self._run_args(component, hostname, env or {}, memory),
            self.image, *(command or (component,)),
            cwd=self.home,
        )
        self.containers.append(name)
        return name

    def start_worker(
        self, hostname: str, *, queues: str = "default", concurrency: int = 2, memory: str | None = None
    ) -> str:
        """A Celery worker in its own container, with the container's host name as its node name.

        Like a deployment's, its entrypoint waits for the database (``airflow db check``) first, and
        its log server has a port of its own (the host network is shared). ``memory``: as ``start``'s.
        """
        return self.start(
            hostname,
            "celery", "worker", "--queues", queues, "--concurrency", str(concurrency),
            hostname=hostname,
            env={"AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()), "CONNECTION_CHECK_MAX_COUNT": "20"},
            memory=memory,
        )

    def exec(self, component: str, *command: str, timeout: float = 60) -> str:
        """Run ``command`` inside the running container of ``component``; its output."""
        proc = self.engine.run("exec", self.container(component), *command, check=False, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"exec {' '.join(command)} in {component} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return proc.stdout

    def running(self, component: str) -> bool:
        """Whether the container of ``component`` is running (the engine's ``State.Running``)."""
        proc = self.engine.run("inspect", "--format", "{{.State.Running}}", self.container(component), check=False)
        return proc.stdout.strip() == "true"

    def kill(self, component: str) -> float:
        """SIGKILL the container (its init, so every process in it); return when it has stopped."""
        name = self.container(component)
        self.engine.run("kill", "--signal", "KILL", name)
        self.engine.run("wait", name, timeout=60)
        return time.time()

    def restart(self, component: str) -> float:
        """``start`` the stopped container again: same name, host name and settings, a new process."""
        started = time.time()
        self.engine.run("start", self.container(component), cwd=self.home)  # see start()
        return started

    def logs(self, component: str, tail: int = 200) -> str:
        proc = self.engine.run("logs", "--tail", str(tail), self.container(component), check=False)
        return proc.stdout + proc.stderr

    def dump_logs(self, *components: str) -> None:
        for component in components or [c.removeprefix(f"{self.name}-") for c in self.containers]:
            print(f"--- {component} ---\n{self.logs(component)[-6000:]}")

    def remove(self) -> None:
        if self.containers:
            wait = ["--time", "0"] if self.engine.name == "podman" else []
            self.engine.run("rm", "--force", *wait, *self.containers, check=False, timeout=120)
            self.containers.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    # --- the api-server ----------------------------------------------------------------------------
    def rest(self, path: str, body: dict | None = None) -> Any:
        """A REST API v2 call (every request is an admin's: SIMPLE_AUTH_MANAGER_ALL_ADMINS)."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.api_port}/api/v2{path}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="GET" if body is None else "POST",
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.loads(resp.read())

    def wait_api(self, timeout: float = 240) -> None:
        wait_for(lambda: self.rest("/monitor/health"), timeout=timeout, interval=1, what="the api-server")

    def trigger(self, dag_id: str) -> str:
        run = self.rest(f"/dags/{dag_id}/dagRuns", {"logical_date": None})
        return run["dag_run_id"]

    def wait_parsed(self, dag_ids: list[str], timeout: float = 240) -> None:
        wait_for(
            lambda: {d["dag_id"] for d in self.rest("/dags?limit=100")["dags"]} >= set(dag_ids),
            timeout=timeout,
            interval=2,
            what=f"the dag-processor to parse {', '.join(dag_ids)}",
        )

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict]:
        """Every try of a task instance, as the REST API shows them (oldest first)."""
        path = f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/{task_id}/tries"
        tries = self.rest(path)["task_instances"]
        return sorted(tries, key=lambda t: t["try_number"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.rest(f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")["state"]

    def records(self, run_id: str) -> list[dict]:
        """What the held task (tests/providers/dags/aip97_celery_worker_restart.py) wrote for a run."""
        return read_jsonl(self.dir["out"] / f"{run_id.replace(':', '_')}.jsonl")
