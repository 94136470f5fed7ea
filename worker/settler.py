"""The worker's writer: settles outcomes from a thread of its own, so the main thread can
claim and run the next job while the last ones are written.

Outcomes wait at most `FLUSH_EVERY` (or less, when the main thread finishes a batch and
asks for it), whatever the job running meanwhile does; successes of one flush settle in one
statement. A write is retried through a brief outage for up to one lease, so an outage does
not turn a success into a rerun; the leases of outcomes not yet written stay held (and
renewed) until they are. A worker that could not write an outcome for a whole lease ends
itself: it holds leases it can neither renew nor settle, and only its death lets its
supervisor, or the sweep, give them back.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from jobsup import exits
from jobsup.errors import DatabaseError
from jobsup.observe.events import emit
from jobsup.store.rows import Outcome

if TYPE_CHECKING:
    from jobsup.worker.loop import Worker

FLUSH_EVERY = 0.5  # seconds an outcome may wait to be written with others
TICK = 0.1  # how often the writer looks at the age of what waits (adding does not wake it)


class Settler:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.cond = threading.Condition()
        self.pending: list[Outcome] = []
        self.oldest = 0.0  # monotonic time the oldest pending outcome arrived
        self.urgent = False
        self.writing = False

    def start(self) -> None:
        threading.Thread(target=self._write_forever, name="jobsup-settle", daemon=True).start()

    def add(self, outcome: Outcome) -> None:
        # Not woken here: a thread switch per job would cost more than the write; the writer
        # looks every TICK and writes what has waited long enough.
        with self.cond:
            if not self.pending:
                self.oldest = time.monotonic()
            self.pending.append(outcome)

    def flush_soon(self) -> None:
        with self.cond:
            self.urgent = True
            self.cond.notify_all()

    def write_here(self) -> None:
        """Write what is pending in the calling thread, now (one writer at a time, SQLite:
        a hand-over to the settler's thread would only add a thread switch)."""
        with self.cond:
            batch, self.pending = self.pending, []
        if batch:
            self._write(batch)

    def drain(self, timeout: float | None = None) -> bool:
        """Write everything pending now; wait (up to `timeout`) until it is written."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            self.urgent = True
            self.cond.notify_all()
            while self.pending or self.writing:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.cond.wait(left)
        return True

    def _write_forever(self) -> None:
        while True:
            with self.cond:
                while not self.pending or not (self.urgent or time.monotonic() >= self.oldest + FLUSH_EVERY - TICK):
                    self.cond.wait(TICK)
                batch, self.pending, self.urgent, self.writing = self.pending, [], False, True
            try:
                self._write(batch)
            finally:
                with self.cond:
                    self.writing = False
                    self.cond.notify_all()

    def _write(self, batch: list[Outcome]) -> None:
        transitions = self.worker.store.transitions
        deadline, delay = time.monotonic() + self.worker.settings.lease, 0.1
        while True:
            try:
                transitions.settle(batch)
                break
            except DatabaseError as exc:
                if time.monotonic() + delay > deadline:
                    emit("db.error", operation="settle", error=exc, gave_up=True)
                    exits.now(exits.LEASE_LOST)
                emit("db.error", operation="settle", error=exc, retry_in=delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
        self.worker.keeper.drop({outcome.held.id for outcome in batch})
