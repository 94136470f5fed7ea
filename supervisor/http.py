"""The supervisor's HTTP endpoints, served from daemon threads: GET /metrics (Prometheus text
format, every jobsup process of this supervisor aggregated) and GET /healthz (200 while the
loop ticks, the database answers and no worker slot keeps failing at boot; 503 otherwise).
Routes are registered on a `Router`, so later endpoints are one line each; nothing here
touches the loop's state but what `Health` is told.

A connection that sends nothing cannot hold a thread: a request must arrive within
`READ_TIMEOUT`, at most `MAX_CONNECTIONS` are open at once, and when that many are open a
new connection evicts the one that has waited longest without sending its request (or is
refused when every one of them is being served), so a scrape gets through however many idle
connections someone opens.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from jobsup.errors import ConfigurationError
from jobsup.observe import metrics_files
from jobsup.observe.events import emit

READ_TIMEOUT = 5.0
MAX_CONNECTIONS = 16
TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = TEXT

    @classmethod
    def text(cls, status: int, text: str) -> Reply:
        return cls(status, (text + "\n").encode())


Handler = Callable[[], Reply]


class Router:
    """GET routes by exact path."""

    def __init__(self) -> None:
        self.routes: dict[str, Handler] = {}

    def get(self, path: str, handler: Handler) -> None:
        self.routes[path] = handler

    def dispatch(self, method: str, path: str) -> Reply:
        handler = self.routes.get(path.split("?", 1)[0])
        if handler is None:
            return Reply.text(404, f"not found: try {' or '.join(sorted(self.routes))}")
        if method != "GET":
            return Reply.text(405, f"{method} is not allowed here: use GET")
        return handler()


class Endpoints(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, host: str, port: int, router: Router, max_connections: int = MAX_CONNECTIONS) -> None:
        super().__init__((host, port), _Handler)
        self.router, self.max_connections = router, max_connections
        self.lock = threading.Lock()
        self.open: dict[socket.socket, float | None] = {}  # connection -> when it began waiting (None: served)

    @classmethod
    def bound(cls, host: str, port: int, router: Router) -> Endpoints:
        """Listening on `host`:`port`, or a `ConfigurationError` saying what to do instead."""
        try:
            return cls(host, port, router)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve /metrics on {host}:{port}: {exc.strerror or exc}; another jobsup may hold it: "
                "give --metrics-port 0 (any free port) or -1 (none), or JOBSUP_METRICS_PORT"
            ) from None

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, name="jobsup-http", daemon=True).start()
        host, port = self.server_address[:2]
        emit("metrics.serving", url=f"http://{host!s}:{port}/metrics", port=port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            full = len(self.open) >= self.max_connections and not self._evict_idlest()
            if not full:
                self.open[request] = time.monotonic()
        if full:  # every slot serves a request: this one is refused, not queued behind them
            super().shutdown_request(request)
            return
        super().process_request(request, client_address)

    def _evict_idlest(self) -> bool:
        waiting = [(since, conn) for conn, since in self.open.items() if since is not None]
        if not waiting:
            return False
        _, conn = min(waiting, key=lambda item: item[0])
        self.open.pop(conn, None)
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)  # its thread's read returns at once and the thread ends
        return True

    def request_arrived(self, conn: socket.socket) -> None:
        with self.lock:
            if conn in self.open:
                self.open[conn] = None

    def shutdown_request(self, request: Any) -> None:
        with self.lock:
            self.open.pop(request, None)
        super().shutdown_request(request)


class _Handler(BaseHTTPRequestHandler):
    server: Endpoints
    timeout = READ_TIMEOUT  # applied to the socket: a silent client is dropped
    protocol_version = "HTTP/1.0"

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        self.server.request_arrived(self.connection)
        return parsed

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def _answer(self, method: str) -> None:
        try:
            reply = self.server.router.dispatch(method, self.path)
        except Exception as exc:  # a scraper must hear why, not see the connection drop
            emit("http.failed", path=self.path, exc=exc)
            reply = Reply.text(500, f"{self.path} failed: {type(exc).__name__}: {exc}")
        self._reply(reply)

    def _reply(self, reply: Reply) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    def log_message(self, format: str, *args: object) -> None:
        """Scrapes are not news: no access log."""


class Health:
    """The loop reports each turn and what is wrong with the workers; /healthz also asks the
    database, at most once a second and one request at a time: while one asks, the others
    get the last answer, or hear that the database has not answered for a while."""

    def __init__(self, ping: Callable[[], None], stale_after: float = 10.0) -> None:
        self.ping, self.stale_after = ping, stale_after
        self.ticked = time.monotonic()
        self.problems: list[str] = []
        self.lock = threading.Lock()
        self.checked, self.answer = 0.0, (False, "not checked yet")
        self.failure = ""  # the last database error logged
        self.asking_since: float | None = None

    def tick(self, problems: list[str]) -> None:
        self.ticked, self.problems = time.monotonic(), problems

    def __call__(self) -> tuple[bool, str]:
        now = time.monotonic()
        if now - self.ticked > self.stale_after:
            return False, f"supervisor loop has not ticked for {now - self.ticked:.0f}s"
        if self.problems:
            return False, "; ".join(self.problems)
        if not self.lock.acquire(blocking=False):
            since = self.asking_since
            if since is not None and now - since > 2.0:
                return False, f"database: no answer for {now - since:.0f}s"
            return self.answer
        try:
            if now - self.checked >= 1.0:
                self.asking_since = now
                try:
                    self.ping()
                    self.answer, self.failure = (True, "ok"), ""
                except Exception as exc:
                    # /healthz is unauthenticated (and often bound to 0.0.0.0 for probes): the
                    # error names the database's user, host, port and name, so only the log
                    # gets it, once per distinct failure, not once per probe.
                    self.answer = (False, "database: unavailable")
                    if str(exc) != self.failure:
                        self.failure = str(exc)
                        emit("health.failed", error=self.failure)
                finally:
                    self.asking_since = None
                self.checked = time.monotonic()
            return self.answer
        finally:
            self.lock.release()


def supervisor_routes(health: Health) -> Router:
    router = Router()

    def scrape() -> Reply:
        body, content_type = metrics_files.exposition()
        return Reply(200, body, content_type)

    def healthz() -> Reply:
        ok, reason = health()
        return Reply.text(200 if ok else 503, reason)

    router.get("/metrics", scrape)
    router.get("/healthz", healthz)
    return router
