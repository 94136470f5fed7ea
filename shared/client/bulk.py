"""A long `enqueue_many`, built and inserted side by side.

Built whole and then inserted, a bulk enqueue on PostgreSQL spends about a third of its
time in Python building the rows and the rest waiting while the database inserts them, one
after the other. Here a thread builds the jobs a chunk at a time (`Dialect.bulk_chunk`)
while the calling thread inserts the chunk built before, in one transaction: the database's
work on one chunk hides the building of the next (the wait for a reply lets go of the GIL).

What the caller sees is unchanged. Every job is checked before the commit, and a bad one,
named by its place in the whole list (``jobs[7001]: ...``), leaves nothing written: the
chunks already inserted roll back with the transaction. The ids come back in the list's
order, and the enqueue's log lines and metrics are emitted once, after the commit.

The cost: the transaction is open while the later chunks are built, not only while they
are inserted. What an insert locks until the commit (a concurrency key's row, which the
settles of that key's jobs wait for; a new unique key, which an enqueue of the same key
waits for) stays locked that much longer: for plain no-op jobs about a third more.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from jobsup.client.core import ClientCore
from jobsup.events import publishing
from jobsup.store.rows import NewJob

# Chunks built ahead of the insert: one in the queue while another is built is enough to
# keep the inserting thread busy, and bounds what waits in memory.
AHEAD = 1


def enqueue_side_by_side(
    core: ClientCore, jobs: Sequence[Mapping[str, Any]], allow_unknown: bool, chunk: int
) -> list[int]:
    """Enqueue `jobs` (more than `chunk` of them) in one transaction, building each chunk
    while the one before is inserted; their ids, in order."""
    store = core.store  # its schema check, here, before the builder asks for job types
    handoff: queue.Queue[list[NewJob] | BaseException | None] = queue.Queue(maxsize=AHEAD)
    stop = threading.Event()  # the inserting thread gave up: the builder stops too

    def hand(item: list[NewJob] | BaseException | None) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def build() -> None:
        try:
            for start in range(0, len(jobs), chunk):
                if not hand(core.build_many(jobs[start : start + chunk], allow_unknown, "jobs", first=start)):
                    return
        except BaseException as exc:  # raised by the inserting thread, as if built there
            hand(exc)
            return
        hand(None)

    # In a copy of the caller's context: a job built there takes the caller's trace.
    builder = threading.Thread(
        target=contextvars.copy_context().run, args=(build,), name="jobsup-enqueue-build", daemon=True
    )
    every: list[NewJob] = []
    ids: list[int] = []
    positions: list[int] = []
    clock = store.db.dialect.clock_params(None)
    builder.start()
    try:
        with store.db.transaction("enqueue") as conn:
            while (built := handoff.get()) is not None:
                if isinstance(built, BaseException):
                    raise built
                found, inserted = store.transitions.insert(conn, built, clock)
                positions.extend(len(every) + i for i in inserted)
                ids.extend(found)
                every.extend(built)
    finally:
        stop.set()
        builder.join()
    publishing.emit_enqueued(every, ids, positions)
    return ids
