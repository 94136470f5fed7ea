"""Logic emits events; subscribers turn them into log lines and metrics. This is the one
place a process's events go through to the log and the metrics; each type is declared in
`jobsup.events.catalogue`. (The public events also reach the outbox and the hooks, from the
transaction that makes them true: `jobsup.events.publishing`.)

An event is a name and fields: ``emit("job.failed", job=42, name="send-email", attempt=2)``.
State changes are announced by the transitions after their commit (never before the write
they announce); process events (``worker.spawned``) by the loops. An event may carry the
exception it reports (`exc`), whose traceback the log shows. Payload values never reach
here: errors arrive already scrubbed.

A subscriber that raises is reported through the log and never stops the others or the
code that emitted. The log and metric subscribers are added where a process starts using
jobsup (`jobsup.observe.subscribe_logs_and_metrics`), not by importing this module.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

Subscriber = Callable[[str, dict[str, Any]], None]

_subscribers: tuple[Subscriber, ...] = ()  # replaced whole, so `emit` reads it without a lock
_changing = threading.Lock()
_log = logging.getLogger("jobsup.events")


def subscribe(subscriber: Subscriber) -> Subscriber:
    """Call `subscriber(kind, fields)` for every event from now on; returns it."""
    global _subscribers
    with _changing:  # two threads subscribing at once (two first Clients) must not lose one
        if subscriber not in _subscribers:
            _subscribers = (*_subscribers, subscriber)
    return subscriber


def unsubscribe(subscriber: Subscriber) -> None:
    global _subscribers
    with _changing:
        _subscribers = tuple(s for s in _subscribers if s is not subscriber)


def emit(kind: str, /, *, exc: BaseException | None = None, **fields: Any) -> None:
    if exc is not None:
        fields["exc"] = exc
    for subscriber in _subscribers:
        try:
            subscriber(kind, fields)
        except Exception:
            _log.exception("event subscriber %r failed on %s", subscriber, kind)
