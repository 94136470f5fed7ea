"""The lease threads: one renews the worker's leases every heartbeat, the other enforces the
running jobs' deadlines (cancel, end the process), so that two attempts of one job never
overlap. What each does and why: docs/internals.md, "The lease threads". The second also
writes the worker's per-job metric samples at each of its ticks (`jobsup.observe.metrics`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobsup import exits
from jobsup.errors import DatabaseError
from jobsup.observe import metrics
from jobsup.observe.events import emit
from jobsup.observe.tracing import NOT_TRACED, Traced
from jobsup.store.rows import ClaimedJob
from jobsup.worker.cancel import CancelEvent
from jobsup.worker.execute import CANCELLED, LEASE_LOST, SHUTDOWN, TIMEOUT

if TYPE_CHECKING:
    from jobsup.store.transitions import Transitions
    from jobsup.worker.settler import Settler
    from jobsup.worker.slot import Slot
    from jobsup.worker.spec import WorkerSpec
    from jobsup.worker.stop import StopRequest

HOLD_WAITING = 1.0  # seconds a job may wait: behind the one running in its batch, or claimed ahead by a pool
ORPHAN_GRACE = 5.0  # seconds an orphan that holds no lease has to end itself before this thread does
_EXIT_FOR = {TIMEOUT: exits.TIMED_OUT, SHUTDOWN: exits.SHUTDOWN_FORCED}


@dataclass
class Running:
    """A job the main thread is running, as the lease threads see it."""

    job: ClaimedJob
    timeout: float | None
    started: float = field(default_factory=time.monotonic)
    claimed_at: float = 0.0  # its own claim set its lease (monotonic): see `LeaseKeeper.claimed_at`
    cancelled: threading.Event = field(default_factory=CancelEvent)
    reason: str | None = None  # why it was cancelled: see jobsup.worker.execute
    cancelled_at: float | None = None
    # Also called on cancellation: an async job's task is cancelled, not only told.
    on_cancel: Callable[[], object] | None = None
    traced: Traced = NOT_TRACED  # its run's span (`jobsup.observe.tracing`), from its start
    # Its call has returned and only its outcome's write remains (which may wait for a key a
    # caller holds): nothing is left to time out or cancel.
    returned: bool = False

    def hook(self, on_cancel: Callable[[], object]) -> None:
        """Cancel through `on_cancel` too, at once if the job was cancelled already."""
        self.on_cancel = on_cancel
        if self.cancelled.is_set():
            on_cancel()


class LeaseKeeper:
    def __init__(
        self,
        spec: WorkerSpec,
        transitions: Transitions,
        slot: Slot,
        stop: StopRequest,
        settler: Settler,
        *,
        ending: threading.Event,
        pooled: bool,
        end_now: Callable[[Running, int], object],
        title: Callable[[str], object],
        announce_starts: Callable[[], object],
    ) -> None:
        """`settler` writes the releases this thread decides; `ending` is set once the process
        is ending (nothing starts then); `pooled`: the worker runs several at once (a job that
        waits was claimed ahead of its places); `end_now(running, code)` ends the process for a
        job that will not stop; `title(doing)` sets the process title; `announce_starts()`
        announces the starts a batch holds (each tick)."""
        self.spec, self.transitions, self.slot, self.stop, self.settler = spec, transitions, slot, stop, settler
        self.ending, self.pooled, self.end_now, self.title = ending, pooled, end_now, title
        self.announce_starts = announce_starts
        self.label = spec.label
        settings = spec.settings
        self.lease, self.heartbeat = settings.lease, settings.heartbeat
        self.grace = settings.shutdown_grace
        self.cancel_grace = min(5.0, self.heartbeat)
        self.tick = min(0.25, self.heartbeat / 4)
        self.lock = threading.Lock()
        self.held: dict[int, ClaimedJob] = {}  # the jobs of every lease this worker holds
        # When each held lease was set by its claim. A lease is good from the later of that and
        # `renewed_at`: a job claimed after an outage holds a fresh lease even while an older
        # one (an outcome whose write waited through the outage) keeps `renewed_at` back.
        self.claimed_at: dict[int, float] = {}
        self.waiting: dict[int, ClaimedJob] = {}  # claimed, not started, in claim order
        # A pool's waiting jobs (claimed ahead, `jobsup.worker.ahead`): since when each waits,
        # from its claim's return (a claim slow to come back has not kept it from a place).
        self.waiting_since: dict[int, float] = {}
        self.running: dict[int, Running] = {}
        self.renewed_at = 0.0  # monotonic start of the claim or renewal that set the leases
        self.unrenewed: float | None = None  # earliest claim since the last renewal's snapshot
        self.next_renewal = 0.0
        self.titled: Running | None = None  # the job the process title names
        self.batch_title = "running a batch"
        self.orphaned_at: float | None = None  # since when the orphan has held no lease
        self.leaving = False  # this thread has decided to end the orphan

    def start(self) -> None:
        threading.Thread(target=self._guarded, args=(self._renew_forever,), name="jobsup-renew", daemon=True).start()
        threading.Thread(target=self._guarded, args=(self._enforce_forever,), name="jobsup-lease", daemon=True).start()

    # -- called by the main thread and the settler -------------------------------------------

    def hold(self, jobs: list[ClaimedJob], claimed_at: float) -> None:
        returned_at = time.monotonic() if self.pooled else 0.0
        with self.lock:
            if not self.held:
                # Otherwise older leases (outcomes not yet written) set when all are renewed.
                self.renewed_at, self.next_renewal = claimed_at, claimed_at + self.heartbeat
                self.slot.renewed(claimed_at)
            elif claimed_at < self.renewed_at:
                # A renewal that ended while this claim was on its way did not cover its leases:
                # all are judged from the claim until the next renewal, due a heartbeat after it
                # (not after that renewal), so the older ones are not judged stale meanwhile.
                self.renewed_at = claimed_at
                self.next_renewal = min(self.next_renewal, claimed_at + self.heartbeat)
                self.slot.renewed(claimed_at)
            # A renewal already under way does not cover these leases: it must not claim
            # they were set later than their claim.
            self.unrenewed = claimed_at if self.unrenewed is None else min(self.unrenewed, claimed_at)
            by_id = {job.id: job for job in jobs}
            self.held.update(by_id)
            self.claimed_at.update(dict.fromkeys(by_id, claimed_at))
            self.waiting.update(by_id)
            if self.pooled:
                self.waiting_since.update((job.id, returned_at) for job in jobs)
        if not self.pooled and len(jobs) > 1:  # its jobs are named once they run long (`_show_long`)
            self.batch_title = f"running a batch of {len(jobs)}"
            self.title(self.batch_title)

    def begin(self, job: ClaimedJob, timeout: float | None, *, named: bool = False) -> Running | None:
        """Start `job` if it may still start (`named`: in the process title at once, see
        `_show_long`). None when it may not: it was released or lost while it waited, the
        worker is ending, its lease is about to lapse (during an outage a batch's later
        leases run out while nothing renews them; such a job is released), or a pool's job
        has waited `HOLD_WAITING` (released)."""
        with self.lock:
            if self.waiting.get(job.id) is not job or self.ending.is_set():
                return None
            del self.waiting[job.id]
            now, since = time.monotonic(), self.waiting_since.pop(job.id, None) if self.pooled else None
            claimed_at = self.claimed_at.get(job.id, 0.0)
            lapsing = now >= self._lapses_at(claimed_at) - 2 * self.heartbeat
            stale = lapsing or (since is not None and now >= since + HOLD_WAITING)
            if not stale:
                running = self.running[job.id] = Running(job, timeout, now, claimed_at)
                self.slot.start(job.id, job.attempt, timeout, claimed_at)
                if named:
                    self._show(running)
        if stale:
            self.settler.release([job])
            return None
        return running

    def end(self, running: Running) -> None:
        with self.lock:
            if self.running.get(running.job.id) is running:
                del self.running[running.job.id]
            self.slot.finish(running.job.id)
            if self.titled is running:  # named while it ran long: not the name of the batch's next jobs
                self.titled = None
                if self.waiting:
                    self.title(self.batch_title)

    def _show(self, running: Running) -> None:
        """Name `running` in the process title, while it runs (under the lock)."""
        if self.running.get(running.job.id) is running and self.titled is not running:
            self.titled = running
            job = running.job
            self.title(f"running {job.name} id={job.id} attempt={job.attempt}")

    def known_ids(self) -> set[int]:
        """The jobs of every lease this worker knows it holds."""
        with self.lock:
            return set(self.held)

    def take_waiting(self, among: list[ClaimedJob] | None = None) -> list[ClaimedJob]:
        """The jobs still waiting in the claimed batch, or those of `among` still waiting,
        taken out of the wait (they will not start here)."""
        with self.lock:
            if among is None:
                jobs, self.waiting, self.waiting_since = list(self.waiting.values()), {}, {}
            else:
                jobs = [self.waiting.pop(job.id) for job in among if self.waiting.get(job.id) is job]
                for job in jobs:
                    self.waiting_since.pop(job.id, None)
        return jobs

    def drop(self, jobs: list[ClaimedJob]) -> None:
        """Forget the leases of these claims: their outcome was written, or they were lost."""
        with self.lock:
            for job in jobs:
                if self.held.get(job.id) is job:
                    del self.held[job.id]
                    del self.claimed_at[job.id]
                if self.waiting.get(job.id) is job:
                    del self.waiting[job.id]
                    self.waiting_since.pop(job.id, None)

    # -- the threads ------------------------------------------------------------------------

    def _guarded(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        except BaseException as exc:
            emit("worker.crashed", worker=self.label, thread="lease", exc=exc)
            os._exit(exits.LEASE_LOST)

    def _renew_forever(self) -> None:
        while True:
            time.sleep(max(0.0, min(self.next_renewal - time.monotonic(), self.tick)))
            if time.monotonic() >= self.next_renewal:
                self._renew(time.monotonic())

    def _enforce_forever(self) -> None:
        while True:
            time.sleep(self.tick)
            self.announce_starts()  # a batch's held starts: counted within a tick (`jobsup.worker.starts`)
            try:
                metrics.write_deferred()
            except Exception as exc:  # counts are lost, never the leases this thread keeps
                emit("metrics.write_failed", worker=self.label, error=exc)
            now = time.monotonic()
            with self.lock:
                running = list(self.running.values())
                # A batch waits on the one job running; a pool's job claimed ahead on its own wait.
                blocking = not self.pooled and bool(self.waiting)
                blocking = blocking and any(now >= r.started + HOLD_WAITING for r in running)
                since = next(iter(self.waiting_since.values()), None)  # the longest wait is the first
            for job in running:
                self._enforce(job, now)
            if not self.pooled:
                self._show_long(running, now)
            if blocking:
                self._release_waiting()
            elif since is not None and now >= since + HOLD_WAITING:
                self._release_waiting(now - HOLD_WAITING)
            self._end_stuck_orphan(now)

    def _renew(self, now: float) -> None:
        with self.lock:  # (`hold` moves `next_renewal` too)
            jobs, self.unrenewed = list(self.held.values()), None
            if not jobs:
                self.next_renewal = now + self.heartbeat
                return
        try:
            renewed = self.transitions.renew([job.lease for job in jobs], lease=self.lease)
        except DatabaseError as exc:
            emit("db.error", operation="renew", worker=self.label, error=exc)
            self.next_renewal = now + min(1.0, self.heartbeat)
            return
        lost = [job for job in jobs if job.id not in renewed]
        asked = [job for job in jobs if job.id in renewed.cancel_requested]
        self.drop(lost)
        with self.lock:
            self.renewed_at = now if self.unrenewed is None else min(now, self.unrenewed)
            running = [r for job in lost if (r := self.running.get(job.id)) is not None and r.job is job]
            to_cancel = [
                r for job in asked if (r := self.running.get(job.id)) is not None and r.job is job and not r.returned
            ]
            # Asked before it started: it never will; its release ends it `cancelled`.
            unstarted = [job for job in asked if self.waiting.get(job.id) is job]
            for job in unstarted:
                del self.waiting[job.id]
                self.waiting_since.pop(job.id, None)
            self.slot.renewed(self.renewed_at)
            # A heartbeat after the time the leases are judged from: sooner than `now` when a
            # claim's leases did not take part.
            self.next_renewal = self.renewed_at + self.heartbeat
        for r in running:
            emit("job.lease_lost", job=r.job.id, name=r.job.name, attempt=r.job.attempt)
            self._cancel(r, LEASE_LOST, now)
        for r in to_cancel:
            self._cancel(r, CANCELLED, now)
        self.settler.release(unstarted)

    def _lapses_at(self, claimed_at: float) -> float:
        """When a lease this worker claimed at `claimed_at` lapses, as far as it knows: a
        lease's length after the later of that claim and the last renewal that covered it."""
        return max(self.renewed_at, claimed_at) + self.lease

    def _enforce(self, running: Running, now: float) -> None:
        lapses_at = self._lapses_at(running.claimed_at)
        if now >= lapses_at - 2 * self.heartbeat:
            self._cancel(running, LEASE_LOST, now)
        if now >= lapses_at - self.heartbeat:
            self.end_now(running, exits.LEASE_LOST)
        stop = self.stop
        if running.returned:
            # Only its outcome's write is left (waiting for a key a caller holds, say): no
            # timeout or cancel applies; a shutdown's grace (and a cancel's) still bounds it,
            # and its supervisor then releases the job.
            if stop.requested_at is not None and (
                stop.immediate or now >= stop.requested_at + self.grace + self.cancel_grace
            ):
                self.end_now(running, exits.SHUTDOWN_FORCED)
            return
        if running.timeout is not None and now >= running.started + running.timeout:
            self._cancel(running, TIMEOUT, now)
        if stop.requested_at is not None and (stop.immediate or now >= stop.requested_at + self.grace):
            self._cancel(running, SHUTDOWN, now)
        if running.cancelled_at is not None and now >= running.cancelled_at + self.cancel_grace:
            self.end_now(running, _EXIT_FOR.get(running.reason or "", exits.LEASE_LOST))

    def _end_stuck_orphan(self, now: float) -> None:
        if os.getppid() == self.spec.supervisor_pid:
            return
        with self.lock:
            if not self.leaving:
                if self.held or self.running or self.ending.is_set():  # (ending: `end_now` has it)
                    self.orphaned_at = None  # the grace runs from when it last held a lease
                    return
                if self.orphaned_at is None:
                    self.orphaned_at = now
                if now < self.orphaned_at + ORPHAN_GRACE:
                    return
                # Decided under the lock `begin` takes: from here no job starts in this
                # process (a claim that returns meanwhile is held, never started).
                self.ending.set()
                self.leaving = True
        frame = sys._current_frames().get(threading.main_thread().ident or 0)
        where = "".join(traceback.format_stack(frame)).rstrip() if frame is not None else "(unknown)"
        try:
            # Nothing runs here, so every lease of this worker in the database is one it will
            # never start: a claim committed while its reply was on the way, or held unstarted.
            released = self.transitions.sweep.release_orphans(self.spec.worker_id, (), operation="release")
        except DatabaseError as exc:
            emit("db.error", operation="release", worker=self.label, error=exc)
            return  # again on the next tick
        emit("worker.orphan_stuck", worker=self.label, released=released or None, traceback=where)
        exits.now(exits.PARENT_GONE)

    def _cancel(self, running: Running, reason: str, now: float) -> None:
        if running.cancelled_at is None:
            running.reason, running.cancelled_at = reason, now
            with self.lock:  # only while it is still this worker's running job (an entry is reused)
                if self.running.get(running.job.id) is running:
                    self.slot.ending(running.job.id, _EXIT_FOR.get(reason, exits.LEASE_LOST))
            running.cancelled.set()
            if running.on_cancel is not None:
                running.on_cancel()
            emit("job.cancelling", job=running.job.id, name=running.job.name, reason=reason)

    def bystanders(self) -> None:
        """The worker ends itself for one job: every other running job that was not
        cancelled itself is released when its supervisor buries the worker, unless the
        leases of all are about to lapse (then theirs ended like the rest)."""
        now = time.monotonic()
        with self.lock:
            for running in self.running.values():
                if running.cancelled_at is not None:
                    continue
                lapsing = now >= self._lapses_at(running.claimed_at) - 2 * self.heartbeat
                if not running.returned and running.timeout is not None and now >= running.started + running.timeout:
                    code = exits.TIMED_OUT  # its own timeout passed too: not a bystander
                else:
                    code = exits.LEASE_LOST if lapsing else exits.SHUTDOWN_FORCED
                self.slot.ending(running.job.id, code)

    def _show_long(self, running: list[Running], now: float) -> None:
        """A batch's jobs are not each named in the title as they start (a title costs about
        as much as a short job's events): one that has run for a tick is. Under the lock, so
        a job that has ended is never named after the main thread titled what came next."""
        with self.lock:
            for job in running:
                if now >= job.started + self.tick:
                    self._show(job)

    def _release_waiting(self, waited_since: float | None = None) -> None:
        """Give back the jobs waiting (a pool's: those waiting since `waited_since`)."""
        among = None
        if waited_since is not None:
            # `waiting_since` names only jobs in `waiting`: every path that takes one out of
            # `waiting` takes it out of both (begin, take_waiting, drop, _renew).
            with self.lock:
                waits = self.waiting_since.items()
                among = [job for i, at in waits if at <= waited_since and (job := self.waiting.get(i)) is not None]
        self.settler.release(self.take_waiting(among))
        self.settler.flush_soon()
