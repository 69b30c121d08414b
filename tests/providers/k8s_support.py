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

K8S_FIXTURES = Path(__file__).parent / "fixtures" / "k8s"


def load_pod(name: str) -> dict[str, Any]:
    return json.loads((K8S_FIXTURES / f"{name}.json").read_text())


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
