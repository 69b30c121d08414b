"""
A local Kubernetes API endpoint that replays pod watch events from fixture files.

The real ``kubernetes`` client (``CoreV1Api`` + ``watch.Watch``) talks to it over HTTP, so the
executor's watcher deserializes the fixtures exactly as it would a cluster's watch stream.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import lines

K8S_FIXTURES = Path(__file__).parent / "fixtures" / "k8s"

#: 3.4's executors key a try by its attempt UUID (``TaskInstanceUuid``; the cncf.kubernetes provider
#: turns it on when the core has ``BaseExecutor.get_task_key``), and 3.4's KubernetesExecutor puts
#: that UUID on every pod it creates (the ``task_instance_id`` annotation), then fails only a pod
#: that carries it. On 3.3 the key is the ``TaskInstanceKey`` read from the other annotations.
UUID_KEYS = lines.LINE != lines.DEFAULT_LINE
#: The attempt UUID of the fixtures' pods on a line with UUID keys.
TI_ID = "0193d1a2-7c4e-7b8f-9a01-2d4c9f0a0001"


def load_pod(name: str, *, ti_id: str | None = TI_ID) -> dict[str, Any]:
    """A pod fixture, annotated with the attempt UUID ``ti_id`` as the line's executor annotates it."""
    pod = json.loads((K8S_FIXTURES / f"{name}.json").read_text())
    if UUID_KEYS and ti_id is not None:
        pod["metadata"]["annotations"]["task_instance_id"] = ti_id
    return pod


class FakeKubeAPI:
    """Serve ``GET /api/v1/namespaces/<ns>/pods?watch=true`` from a list of (type, pod) events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.requests: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_GET(self):
                api.requests.append(self.path)
                body = b"".join(
                    json.dumps({"type": etype, "object": obj}).encode() + b"\n" for etype, obj in api.events
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def client(self):
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        return client.CoreV1Api(client.ApiClient(configuration))

    def __enter__(self) -> FakeKubeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
