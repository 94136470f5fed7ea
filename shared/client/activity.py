"""The last hour's throughput and latency, per queue or per job type, as the dashboard's
charts draw them: the database adds the finished jobs up per bucket over the finished
index's range (`OverviewReads.finished_since`), so a busy hour costs one row per queue (or
type) and bucket here, never one per job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from jobsup.client.shapes import Hourly
from jobsup.store.schema import SUCCEEDED
from jobsup.store.store import Store

HOUR = 3600.0
BUCKETS = 12  # the last hour in five-minute buckets


def empty() -> Hourly:
    return {"succeeded": [0] * BUCKETS, "failed": [0] * BUCKETS, "latency": [None] * BUCKETS}


def last_hour(store: Store, *, by: Literal["queue", "job"], now: datetime | None = None) -> dict[str, Hourly]:
    """Each queue's (or job type's) last hour; a queue or type with nothing finished in it
    is left out (`empty()` is its figures)."""
    clock = now or datetime.now(UTC)
    width = HOUR / BUCKETS
    edges = [clock - timedelta(seconds=HOUR - i * width) for i in range(BUCKETS)]
    finished = store.overview.finished_since(edges, by="queue" if by == "queue" else "name")
    done: dict[str, list[int]] = {}
    failed: dict[str, list[int]] = {}
    waits: dict[str, list[float]] = {}
    for row in finished:
        if row.status == SUCCEEDED:
            done.setdefault(row.key, [0] * BUCKETS)[row.bucket] += row.count
            waits.setdefault(row.key, [0.0] * BUCKETS)[row.bucket] += max(0.0, row.waited)
        else:
            failed.setdefault(row.key, [0] * BUCKETS)[row.bucket] += row.count
    found: dict[str, Hourly] = {}
    for key in sorted(done.keys() | failed.keys()):
        succeeded, wait = done.get(key, [0] * BUCKETS), waits.get(key, [0.0] * BUCKETS)
        found[key] = {
            "succeeded": succeeded,
            "failed": failed.get(key, [0] * BUCKETS),
            "latency": [round(w / n, 3) if n else None for w, n in zip(wait, succeeded, strict=True)],
        }
    return found
