"""The supervisor's HTTP endpoints: GET /metrics (Prometheus text format, every jobsup process
of this supervisor aggregated) and GET /healthz (200 while the loop ticks and the database
answers, 503 otherwise). Served from a daemon thread; nothing here touches the loop's state
but two timestamps."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jobsup.observe import metrics
from jobsup.observe.events import event


class Endpoints(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, healthy: Callable[[], tuple[bool, str]]) -> None:
        super().__init__((host, port), _Handler)
        self.healthy = healthy

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, name="jobsup-http", daemon=True).start()
        host, port = self.server_address[:2]
        event("metrics.serving", url=f"http://{host!s}:{port}/metrics", port=port)


class _Handler(BaseHTTPRequestHandler):
    server: Endpoints

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/metrics":
            body, content_type = metrics.exposition()
            self._reply(200, body, content_type)
        elif self.path.split("?")[0] == "/healthz":
            ok, reason = self.server.healthy()
            self._reply(200 if ok else 503, (reason + "\n").encode(), "text/plain; charset=utf-8")
        else:
            self._reply(404, b"not found: try /metrics or /healthz\n", "text/plain; charset=utf-8")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Scrapes are not news: no access log."""


class Health:
    """The loop reports each turn; /healthz also asks the database, at most once a second."""

    def __init__(self, ping: Callable[[], None], stale_after: float = 10.0) -> None:
        self.ping, self.stale_after = ping, stale_after
        self.ticked = time.monotonic()
        self.lock = threading.Lock()
        self.checked, self.answer = 0.0, (False, "not checked yet")

    def tick(self) -> None:
        self.ticked = time.monotonic()

    def __call__(self) -> tuple[bool, str]:
        now = time.monotonic()
        if now - self.ticked > self.stale_after:
            return False, f"supervisor loop has not ticked for {now - self.ticked:.0f}s"
        with self.lock:
            if now - self.checked >= 1.0:
                try:
                    self.ping()
                    self.answer = (True, "ok")
                except Exception as exc:
                    self.answer = (False, f"database: {exc}")
                self.checked = now
            return self.answer
