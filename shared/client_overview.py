"""The client's dashboard reads (a part of `jobsup.Client`, kept apart by role): the
overview's per-queue figures, and the job list one page at a time behind an opaque cursor.
The HTTP API and the dashboard read through these; nothing in `jobsup.web` writes SQL."""

from __future__ import annotations

import base64
import hashlib
import json
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobsup.checks import check_limit, check_name
from jobsup.errors import BadInput
from jobsup.store.rows import Job
from jobsup.store.schema import DEAD_LETTERED, PENDING, RUNNING, STATUSES, SUCCEEDED

if TYPE_CHECKING:
    from jobsup.store import Store

HOUR = 3600.0
SCAN_IDS = 50_000  # the ids a filtered page of the job list looks through, at most
BUCKETS = 12  # the last hour in five-minute buckets


class OverviewAPI:
    """`Client`'s methods for the dashboard."""

    if TYPE_CHECKING:
        store: Store

        def _ready(self) -> None: ...

    def overview(self, *, now: datetime | None = None) -> list[dict[str, Any]]:
        """Per queue: ``pending``, ``running``, ``dead_lettered``, ``oldest_pending_seconds``,
        and over the last hour in twelve five-minute buckets (oldest first) ``succeeded``,
        ``failed`` (dead-lettered) and ``latency`` (mean seconds from due to finished, None
        for an empty bucket). Every figure comes from an indexed query."""
        self._ready()
        reads = self.store.overview
        clock = now or datetime.now(UTC)
        counts = reads.queue_counts()
        oldest = reads.oldest_due(now=now)
        width = HOUR / BUCKETS
        finished = reads.finished_since([clock - timedelta(seconds=HOUR - i * width) for i in range(BUCKETS)])
        states = self.store.pauses.states()
        paused = {queue for queue, state in states.items() if state.paused}
        # Not `pauses.known()`: it reads waiting jobs, which no index covers.
        queues = sorted(set(states) | {queue for queue, _ in counts} | {row.queue for row in finished})
        series: dict[str, dict[str, list[float]]] = defaultdict(
            lambda: {"succeeded": [0.0] * BUCKETS, "failed": [0.0] * BUCKETS, "waits": [0.0] * BUCKETS}
        )
        for row in finished:
            figures = series[row.queue]
            figures["succeeded" if row.status == SUCCEEDED else "failed"][row.bucket] += row.count
            figures["waits"][row.bucket] += max(0.0, row.waited)
        rows = []
        for queue in queues:
            figures = series[queue]
            due = oldest.get(queue)
            rows.append(
                {
                    "queue": queue,
                    "paused": queue in paused,
                    "pending": counts.get((queue, PENDING), 0),
                    "running": counts.get((queue, RUNNING), 0),
                    "dead_lettered": counts.get((queue, DEAD_LETTERED), 0),
                    "oldest_pending_seconds": None if due is None else max(0.0, (clock - due).total_seconds()),
                    "succeeded": [int(n) for n in figures["succeeded"]],
                    "failed": [int(n) for n in figures["failed"]],
                    "latency": [
                        round(wait / done, 3) if done else None
                        for wait, done in zip(figures["waits"], figures["succeeded"], strict=True)
                    ],
                }
            )
        return rows

    def jobs_page(
        self,
        *,
        status: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[Job], str | None]:
        """One page of jobs, newest first, and the cursor of the next page (None at the
        end). A filtered page looks through `SCAN_IDS` ids at most, so it may hold fewer
        than `limit` jobs, or none, while a cursor says older ones may follow. A cursor only
        continues the query that made it: given with other filters, or not one made here,
        it raises `BadInput`. It is not signed: it carries nothing but the last id and the
        filters' fingerprint, and a hand-made one can only start a page at another id."""
        if status is not None and status not in STATUSES:
            raise BadInput(f"status {status!r} is not one of {', '.join(STATUSES)}")
        for value, what in ((queue, "queue"), (name, "job name")):
            if value is not None:
                check_name(value, what)
        limit = check_limit(limit)
        query = _fingerprint(status, queue, name)
        before = None if cursor is None else _open_cursor(cursor, query)
        self._ready()
        reads = self.store.overview
        if status is None and queue is None and name is None:  # the primary key's order: no scan
            found = reads.job_page(before=before, limit=limit + 1)
            page = found[:limit]
            return page, (_make_cursor(page[-1].id, query) if len(found) > limit and page else None)
        # A filter no index orders by id would scan back through every older job for a rare
        # match: each page looks at SCAN_IDS ids at most, and a page that found fewer than
        # `limit` there hands on a cursor to the stretch below it.
        ends = reads.id_range()
        if ends is None:
            return [], None
        top = min(before, ends[1] + 1) if before is not None else ends[1] + 1
        lowest = max(top - SCAN_IDS, ends[0])
        found = reads.job_page(before=top, lowest=lowest, limit=limit + 1, status=status, queue=queue, name=name)
        page = found[:limit]
        if len(found) > limit and page:
            return page, _make_cursor(page[-1].id, query)
        return page, (_make_cursor(lowest, query) if lowest > ends[0] else None)


def _fingerprint(status: str | None, queue: str | None, name: str | None) -> str:
    text = json.dumps([status, queue, name])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _make_cursor(last_id: int, query: str) -> str:
    raw = json.dumps({"before": last_id, "query": query}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _open_cursor(cursor: object, query: str) -> int:
    if not isinstance(cursor, str) or len(cursor) > 200:
        raise BadInput("cursor is not one this API made")
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        before, made_for = data["before"], data["query"]
    except (ValueError, TypeError, KeyError):
        raise BadInput("cursor is not one this API made") from None
    if made_for != query:
        raise BadInput("cursor belongs to another query (other filters): start again without it")
    if isinstance(before, bool) or not isinstance(before, int) or not 0 < before <= 2**63 - 1:
        raise BadInput("cursor is not one this API made")
    return before
