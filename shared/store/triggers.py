"""Triggers: follow-up jobs a job enqueues when it ends (`jobsup.Trigger`), in the
transaction that ends it, so a trigger fires once and only if the end commits."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from jobsup.errors import BadInput, ConfigurationError
from jobsup.store import concurrency_keys
from jobsup.store.builder import build
from jobsup.store.rows import NewJob
from jobsup.store.schema import CANCELLED, DEAD_LETTERED, SUCCEEDED

if TYPE_CHECKING:
    from jobsup.store.steps import StepContext

log = logging.getLogger("jobsup.triggers")

# Which `Trigger.on` values fire for each way a job ends.
FIRES_ON = {
    SUCCEEDED: {"succeeded", "any"},
    DEAD_LETTERED: {"failed", "dead_lettered", "any"},
    CANCELLED: {"failed", "cancelled", "any"},
}


def stored(text: str | None) -> list[dict[str, Any]]:
    """A row's triggers; an unreadable (hand-edited) value fires nothing rather than failing the settle."""
    try:
        described = json.loads(text or "[]")
    except ValueError:
        return []
    if not isinstance(described, list):
        return []
    return [t for t in described if isinstance(t, dict) and isinstance(t.get("job"), str)]


def fire(conn: Connection, t: StepContext, rows: Sequence[Any], clock: Mapping[str, Any]) -> None:
    """Enqueue the follow-ups of the jobs `rows` that ended, in `conn`'s transaction."""
    news: list[NewJob] = []
    for row in rows:
        for trigger in stored(row.triggers):
            if trigger.get("on", "any") not in FIRES_ON.get(row.status, ()):
                continue
            try:
                jobtype = t.resolver.settings_of(trigger["job"])
                options = {"queue": trigger["queue"]} if trigger.get("queue") else {}
                news.append(build(jobtype, trigger.get("payload"), options, links={"parent_id": row.id}))
            except (BadInput, ConfigurationError) as exc:  # valid at enqueue; the row or the job type changed since
                log.warning("job %s: trigger %r not fired: %s", row.id, trigger.get("job"), exc)
    if news:
        with concurrency_keys.bounded(conn, t, news):
            t.insert(conn, news, clock)
