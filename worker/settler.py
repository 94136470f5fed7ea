"""The worker's writer: settles outcomes, from a thread of its own or from the main thread,
retrying through brief outages for up to one lease. When each kind of outcome is written,
and the races that shape it: docs/internals.md, "The settler".
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobsup import exits
from jobsup.errors import DatabaseError, LockBusy
from jobsup.observe import tracing
from jobsup.observe.events import emit
from jobsup.store.rows import RELEASED, SUCCEEDED, ClaimedJob, Outcome
from jobsup.worker.claimsize import ADAPTIVE_MOST

if TYPE_CHECKING:
    from jobsup.store.transitions import Transitions

FLUSH_EVERY = 0.5  # seconds an outcome may wait to be written with others
TICK = 0.1  # how often the writer looks at the age of what waits (adding does not wake it)
KEY_RETRY = 0.5  # seconds between tries of a write whose concurrency key another transaction holds
# Where many write at once, a claim of up to this many jobs has its outcomes written by the
# settler's thread beside the next claim: its round trip is a large part of a small claim's
# turn (9-40 % more jobs a second at the defaults). A larger claim's are the main thread's
# (the two threads' contest for the interpreter cost 7 ms per 1,000 jobs at claim batch 100,
# docs/explanation/performance.md): sent behind the claim where they can be (`write_behind`),
# else written before the next claim.
BESIDE_AT_MOST = ADAPTIVE_MOST  # so every claim of the adaptive default size overlaps

Pending = tuple[ClaimedJob, Outcome]


class Settler:
    def __init__(
        self, transitions: Transitions, *, lease: float, label: str, written: Callable[[list[ClaimedJob]], None]
    ) -> None:
        """`lease`: how long a write is retried through an outage; `label`: the worker's, for
        its log; `written(jobs)`: told once their outcomes are written (the lease keeper
        forgets their leases)."""
        self.transitions, self.lease, self.label, self.written = transitions, lease, label, written
        self.lock = threading.Lock()  # taken directly on the per-job path (cheaper than the condition)
        self.cond = threading.Condition(self.lock)
        self.pending: list[Pending] = []
        self.oldest = 0.0  # monotonic time the oldest pending outcome arrived
        self.urgent = False
        self.writing = 0  # writes under way, in any thread
        # Drains waiting for the writes to end: only they need a write's end announced (a
        # notify per batch woke the writer thread too, a thread switch per settle).
        self.draining = 0
        # Held by the main thread across a claim and by a release across all its tries: a
        # release retried after its first try committed unseen must never meet this worker's
        # new claim of the same job (a release gives the attempt back: the lease is the same).
        self.claim_lock = threading.Lock()
        # A claim's successes sent by `write_behind`, their reply not read yet: the outcomes,
        # and the call that reads the reply (`Transitions.send_complete`).
        self.behind: tuple[list[Pending], Callable[[float | None], set[int]]] | None = None

    def start(self) -> None:
        threading.Thread(target=self._guarded, name="jobsup-settle", daemon=True).start()

    def add(self, job: ClaimedJob, outcome: Outcome) -> None:
        # Not woken here: a thread switch per job would cost more than the write; the writer
        # looks every TICK and writes what has waited long enough.
        with self.lock:
            if not self.pending:
                self.oldest = time.monotonic()
            self.pending.append((job, outcome))

    def release(self, jobs: list[ClaimedJob]) -> None:
        """Give these claimed jobs back unstarted (their attempt not used), with the next write."""
        for job in jobs:
            self.add(job, Outcome(job.held, RELEASED, worker=self.label))

    def flush_soon(self) -> None:
        with self.cond:
            self.urgent = True
            self.cond.notify_all()

    def flush_after_writes(self) -> None:
        """`flush_soon`, once the writes under way have ended: a claim's outcomes are written
        beside the next claim, but no further behind (a write that hangs, on a key a caller
        holds or through an outage, holds back the claims after it, and a worker that dies
        leaves at most one claim's successes unwritten, to run again)."""
        self.read_behind()
        with self.cond:
            self._await(lambda: not self.writing)
        self.flush_soon()

    def write_here(self) -> None:
        """Write what is pending in the calling thread, once the writes under way have ended
        (the same bound as `flush_after_writes`: a write that hangs holds the claims after it
        back); with one writer at a time, or a large claim, a hand-over to the settler's
        thread would only add a thread switch."""
        batch = self._take_pending()
        try:
            self._write(batch)
        finally:
            self._written()

    def write_behind(self) -> None:
        """`write_here`, except that a claim's successes alone (the common case) are sent and
        not waited for: the write commits while the next claim's jobs run, and its reply is
        read (its events sent, its leases forgotten) at the next claim's end, before the
        worker waits for work, or by a drain, so no write is more than one claim behind. Where
        the write cannot be sent so (`Transitions.send_complete`: steps to run, several
        statements, a pooler, something watching the statements), it is written here, as
        releases and failures always are: a release must be written before the next claim
        (`claim_lock`), and a failure has been already."""
        self.read_behind()
        batch = self._take_pending()
        try:
            if batch and all(outcome.kind == SUCCEEDED for _, outcome in batch):
                try:
                    read = self.transitions.send_complete([outcome for _, outcome in batch])
                except DatabaseError as exc:  # sent or not: written here, fenced
                    emit("db.error", operation="settle", error=exc, retry_in=0.0)
                    read = None
                if read is not None:
                    with self.cond:
                        self.behind = (batch, read)
                        hurry = bool(self.draining)  # a drain waits meanwhile: it reads this one
                    if hurry:
                        self.read_behind()
                    return
            self._write(batch)
        finally:
            self._written()

    def read_behind(self, deadline: float | None = None) -> bool:
        """Read the reply of the successes `write_behind` sent, if any: their events are
        sent and their leases forgotten. A reply lost (the connection, or the statement,
        failed) leaves unknown whether the write committed: it is written again, fenced on
        each job's owner and attempt, so a write that had committed settles nothing twice.
        With a `deadline` (monotonic; a worker ending itself), the reply is waited for until
        then and nothing is written again: the leases stay held, for the supervisor to give
        back. Returns whether nothing is left unread."""
        with self.cond:
            sent, self.behind = self.behind, None
            if sent is None:
                return True
            self.writing += 1
        batch, read = sent
        try:
            outcomes = [outcome for _, outcome in batch]
            ids = [outcome.held.lease.job_id for outcome in outcomes]
            with tracing.span("jobsup.settle", {"jobsup.transition": "complete", "jobsup.jobs": len(ids)}, job_ids=ids):
                try:
                    read(deadline)
                except DatabaseError as exc:
                    emit("db.error", operation="settle", error=exc, retry_in=None if deadline is not None else 0.0)
                    if deadline is not None:
                        return False
                    self._retrying(lambda: self.transitions.complete(outcomes))
            self.written([job for job, _ in batch])
            return True
        finally:
            self._written()

    def write_now(self, job: ClaimedJob, outcome: Outcome) -> None:
        """Write one outcome in the calling thread, now."""
        with self.cond:
            self.writing += 1
        try:
            self._write([(job, outcome)])
        finally:
            self._written()

    def drain(self, timeout: float | None = None) -> bool:
        """Write everything pending now; wait (up to `timeout`) until all writes are done,
        those sent behind read back (one may be sent while this waits: then it is read too)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if not self.read_behind(deadline):
                return False
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            with self.cond:
                self.urgent = True
                self.cond.notify_all()
                if not self._await(lambda: (not self.pending and not self.writing) or self.behind is not None, left):
                    return False
                if self.behind is None:
                    return True
                # A write was sent behind meanwhile: read it too, on the next turn.

    def _guarded(self) -> None:
        try:
            self._write_forever()
        except BaseException as exc:
            # Without this thread nothing would be settled again: end the worker, so that
            # its supervisor gives the jobs back.
            emit("worker.crashed", worker=self.label, thread="settle", exc=exc)
            exits.now(exits.CRASHED)

    def _write_forever(self) -> None:
        while True:
            with self.cond:
                while not self.pending or not (self.urgent or time.monotonic() >= self.oldest + FLUSH_EVERY - TICK):
                    self.cond.wait(TICK)
                batch, self.pending, self.urgent = self.pending, [], False
                self.writing += 1
            try:
                self._write(batch)
            finally:
                self._written()

    def _take_pending(self) -> list[Pending]:
        """What is pending, to write in the calling thread, once the writes under way have
        ended; counted as a write under way (`_written` ends it)."""
        with self.cond:
            self._await(lambda: not self.writing)
            batch, self.pending = self.pending, []
            self.writing += 1
        return batch

    def _await(self, done: Callable[[], bool], timeout: float | None = None) -> bool:
        """Wait, holding `cond`, until `done()` (up to `timeout`); return whether it is."""
        self.draining += 1  # so that a write's end is announced
        try:
            return self.cond.wait_for(done, timeout)
        finally:
            self.draining -= 1

    def _written(self) -> None:
        with self.cond:
            self.writing -= 1
            if self.draining:
                self.cond.notify_all()

    def _write(self, batch: list[Pending]) -> None:
        transitions = self.transitions
        successes = [outcome for _, outcome in batch if outcome.kind == SUCCEEDED]
        releases = [outcome.held for _, outcome in batch if outcome.kind == RELEASED]
        parts: list[tuple[str, list[int], Callable[[], object]]] = []
        if successes:
            parts.append(
                ("complete", [o.held.lease.job_id for o in successes], lambda: transitions.complete(successes))
            )
        if releases:
            parts.append(("release", [h.lease.job_id for h in releases], lambda: transitions.release(releases)))
        for _, outcome in batch:
            if outcome.kind not in (SUCCEEDED, RELEASED):
                fail = lambda outcome=outcome: transitions.fail(outcome)  # noqa: E731
                parts.append(("fail", [outcome.held.lease.job_id], fail))
        with self.claim_lock if releases else contextlib.nullcontext():
            for transition, ids, part in parts:
                with tracing.span(
                    "jobsup.settle", {"jobsup.transition": transition, "jobsup.jobs": len(ids)}, job_ids=ids
                ):
                    self._retrying(part)
        self.written([job for job, _ in batch])

    def _retrying(self, write: Callable[[], object]) -> None:
        deadline, delay, held = time.monotonic() + self.lease, 0.1, False
        while True:
            try:
                write()
                return
            except LockBusy as exc:
                # A concurrency key held by a caller's open transaction (`jobsup.store.concurrency_keys`):
                # the write waits for it as long as that takes, and between tries no row of
                # ours is locked, so the leases, this one's too, are renewed meanwhile.
                emit("db.error", operation="settle", error=exc, retry_in=KEY_RETRY, quiet=held)
                held = True
                time.sleep(KEY_RETRY)
                deadline = time.monotonic() + self.lease
            except DatabaseError as exc:
                if time.monotonic() + delay > deadline:
                    emit("db.error", operation="settle", error=exc, gave_up=True)
                    exits.now(exits.LEASE_LOST)
                emit("db.error", operation="settle", error=exc, retry_in=delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
