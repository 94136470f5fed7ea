"""Announcements: the events of changes that are not job transitions (a breaker opening or
closing, a queue paused or resumed, an SLA missed, a batch or workflow finished), made by
the store inside the transaction of the change, once its compare-and-set has matched.

The store only says what happened; `jobsup.events.record` listens (`listen`), writes the
event to the outbox in the same transaction and hands it to hooks after the commit. With
no listener, or one that wants no event of the type, an announcement costs one call.

    announce(conn, "queue.paused", subject=f"queue:{name}", queue=name, actor=actor)

`subject` names the object of an event of no job, and orders its events in the outbox;
an event of a job passes `job=` instead (its events are ordered with the job's): a job
changed outside its transitions (a workflow step cancelled by its failed dependency, or
reopened by a workflow's retry) is announced this way, with `job_fields`.
"""

from __future__ import annotations

from typing import Any, Protocol

from sqlalchemy import Connection


class Listener(Protocol):
    def wants(self, kind: str) -> bool: ...

    def announce(self, conn: Connection, kind: str, subject: str | None, fields: dict[str, Any]) -> None: ...


_listeners: list[Listener] = []


def listen(listener: Listener) -> None:
    """Hear every announcement from now on (one listener: a second replaces the first)."""
    _listeners[:] = [listener]


def job_fields(row: Any) -> dict[str, Any]:
    """What every event of a job says about it, from a row with its id, name, queue,
    attempts and actor."""
    return {"job": row.id, "name": row.name, "queue": row.queue, "attempt": row.attempts, "actor": row.actor}


def announce(conn: Connection, kind: str, /, *, subject: str | None = None, **fields: Any) -> None:
    """Announce a `kind` event on `conn`, in its transaction."""
    for listener in _listeners:
        if listener.wants(kind):
            listener.announce(conn, kind, subject, fields)
