"""`jobsup dashboard`'s bounds on connections, applied before a request reaches the app (and
so before authentication): uvicorn's h11 protocol closes a connection only after a
response, so one client holding a few hundred unfinished requests used to exhaust the
process's open files, after which asyncio logged a traceback for every failed accept.

- A connection whose request headers are not complete `HEADER_SECONDS` after it opened (or
  after its previous answer) is closed, whatever it sent.
- At most `PER_CLIENT` connections per client address, and at most `total_connections()`
  in all (half the open-file limit); one more gets a 503 and is closed at once.
- Accepting never runs out of descriptors: asyncio accepts up to the listen backlog in one
  go and closes a refused connection only on a later turn of its loop, so a burst can hold
  about two backlogs of refused connections at once beside the admitted ones. The backlog
  (`accept_backlog()`) is kept to an eighth of the open-file limit, so the admitted half
  and two backlogs leave a quarter for the process's own files.
"""

from __future__ import annotations

import asyncio
import functools
import resource
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from jobsup.web.api import log

HEADER_SECONDS = 10.0
PER_CLIENT = 32
MAX_TOTAL = 1000
MAX_BACKLOG = 128  # connections the kernel queues before they are accepted
_REFUSED = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


def total_connections() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return MAX_TOTAL if soft == resource.RLIM_INFINITY else max(16, min(MAX_TOTAL, soft // 2))


def accept_backlog() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return MAX_BACKLOG if soft == resource.RLIM_INFINITY else max(8, min(MAX_BACKLOG, soft // 8))


class Guard:
    """The open connections, per client address, of one server."""

    def __init__(self, total: int, per_client: int = PER_CLIENT) -> None:
        self.total, self.per_client = total, per_client
        self.by_client: dict[str, int] = {}
        self.open = 0
        self.refused, self.said = 0, 0.0

    def admit(self, client: str) -> bool:
        if self.open >= self.total or self.by_client.get(client, 0) >= self.per_client:
            self.refused += 1
            now = time.monotonic()
            if now - self.said >= 60:  # said once a minute at most: a flood must not flood the log
                self.said = now
                log.warning("web.connections_refused client=%s refused=%d open=%d", client, self.refused, self.open)
            return False
        self.open += 1
        self.by_client[client] = self.by_client.get(client, 0) + 1
        return True

    def leave(self, client: str) -> None:
        self.open -= 1
        left = self.by_client.pop(client, 1) - 1
        if left:
            self.by_client[client] = left


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, under a `Guard` and a header timeout."""

    def __init__(self, *args: Any, guard: Guard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard, self.admitted = guard, ""
        self.header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        client = self.client[0] if self.client else "unknown"
        if not self.guard.admit(client):
            transport.write(_REFUSED)
            transport.close()
            return
        self.admitted = client
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
        if self.admitted:
            self.guard.leave(self.admitted)
            self.admitted = ""
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()  # the next request's headers get their own time

    def _arm(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
        self.header_timer = self.loop.call_later(HEADER_SECONDS, self._headers_late)

    def _headers_late(self) -> None:
        # Only while no answer is being written: a request the app is still serving is not
        # late, and its answer re-arms the timer.
        if self.cycle is None or self.cycle.response_complete:
            self.transport.close()


def protocol(guard: Guard) -> Any:
    """The protocol class uvicorn builds each connection with."""
    return functools.partial(GuardedH11Protocol, guard=guard)
