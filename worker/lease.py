"""The lease threads: one renews the worker's leases every heartbeat, the other enforces
the running job's deadlines, so that two attempts of one job never overlap. They are
separate so that a renewal hanging on a dead connection cannot stall the enforcement; and
an unexpected error in either ends the process (exit 4), since without them a job could
outlive its lease.

- Renewal: one statement for every lease the worker holds (a claimed batch, and successes
  not yet written). A lease that comes back missing was lost (cancelled, or expired and
  taken by another worker).
- Cancellation: the job's `ctx.cancelled` is set when its lease is lost, when renewal has
  failed for so long that the lease will lapse within two heartbeats, when its timeout
  passes, and after the shutdown grace.
- Ending: a job that has not returned `cancel_grace` after cancellation (or one heartbeat
  before a lease it could not renew would lapse) ends the process from this thread, after
  recording what it can: `timed_out`, or a release on shutdown.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobsup import exits
from jobsup.errors import DatabaseError
from jobsup.observe.events import event, log
from jobsup.store.rows import ClaimedJob, Lease

if TYPE_CHECKING:
    from jobsup.worker.loop import Worker


@dataclass
class Running:
    """The job the main thread is running, as the lease thread sees it."""

    job: ClaimedJob
    timeout: float | None
    started: float = field(default_factory=time.monotonic)
    cancelled: threading.Event = field(default_factory=threading.Event)
    reason: str | None = None  # why it was cancelled: lease_lost, timed_out, shutdown
    cancelled_at: float | None = None
    settled: bool = False  # claimed by whichever thread records the attempt's end
    seconds: float | None = None  # how long the job function ran, once it returned


class LeaseKeeper:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        settings = worker.spec.settings
        self.lease, self.heartbeat = settings.lease, settings.heartbeat
        self.grace = settings.shutdown_grace
        self.cancel_grace = min(5.0, self.heartbeat)
        self.tick = min(0.25, self.heartbeat / 4)
        self.lock = threading.Lock()
        self.held: dict[int, Lease] = {}
        self.renewed_at = 0.0  # monotonic start of the claim or renewal that set the leases
        self.next_renewal = 0.0
        self.running: Running | None = None

    def start(self) -> None:
        threading.Thread(target=self._guarded, args=(self._renew_forever,), name="jobsup-renew", daemon=True).start()
        threading.Thread(target=self._guarded, args=(self._enforce_forever,), name="jobsup-lease", daemon=True).start()

    # -- called by the main thread --------------------------------------------------------

    def hold(self, jobs: list[ClaimedJob], claimed_at: float) -> None:
        with self.lock:
            self.held.update({job.id: job.lease for job in jobs})
            self.renewed_at = claimed_at
            self.next_renewal = claimed_at + self.heartbeat

    def drop(self, job_ids: set[int]) -> None:
        with self.lock:
            for job_id in job_ids:
                self.held.pop(job_id, None)

    def begin(self, running: Running) -> None:
        with self.lock:
            self.running = running

    def end(self) -> None:
        with self.lock:
            self.running = None

    def still_held(self, job_id: int) -> bool:
        """Whether a claimed job may still start: its lease was not lost and is not about to
        lapse (during an outage the batch's later leases run out while nothing renews them)."""
        with self.lock:
            fresh = time.monotonic() < self.renewed_at + self.lease - 2 * self.heartbeat
            return fresh and job_id in self.held

    # -- the thread -----------------------------------------------------------------------

    def _guarded(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        except BaseException:
            log.exception("lease thread failed; ending the worker so its job cannot outlive its lease")
            os._exit(exits.LEASE_LOST)

    def _renew_forever(self) -> None:
        while True:
            time.sleep(max(0.0, min(self.next_renewal - time.monotonic(), self.tick)))
            if time.monotonic() >= self.next_renewal:
                self._renew(time.monotonic())

    def _enforce_forever(self) -> None:
        while True:
            time.sleep(self.tick)
            with self.lock:
                running = self.running
            if running is not None:
                self._enforce(running, time.monotonic())

    def _renew(self, now: float) -> None:
        with self.lock:
            leases = list(self.held.values())
        if not leases:
            self.next_renewal = now + self.heartbeat
            return
        try:
            renewed = self.worker.store.job_renew_lease(leases, lease=self.lease)
        except DatabaseError as exc:
            event("lease.renew_failed", worker=self.worker.spec.label, error=exc)
            self.next_renewal = now + min(1.0, self.heartbeat)
            return
        lost = {lease.job_id for lease in leases} - renewed
        with self.lock:
            self.renewed_at = now
            for job_id in lost:
                self.held.pop(job_id, None)
            running = self.running
        self.next_renewal = now + self.heartbeat
        if running is not None and running.job.id in lost:
            event("job.lease_lost", job=running.job.id, name=running.job.name, attempt=running.job.attempt)
            self._cancel(running, "lease_lost", now)

    def _enforce(self, running: Running, now: float) -> None:
        lapses_at = self.renewed_at + self.lease
        if now >= lapses_at - 2 * self.heartbeat:
            self._cancel(running, "lease_lost", now)
        if now >= lapses_at - self.heartbeat:
            self.worker.end_now(running, exits.LEASE_LOST)
        if running.timeout is not None and now >= running.started + running.timeout:
            self._cancel(running, "timed_out", now)
        stop = self.worker.stop
        if stop.requested_at is not None and (stop.immediate or now >= stop.requested_at + self.grace):
            self._cancel(running, "shutdown", now)
        if running.cancelled_at is not None and now >= running.cancelled_at + self.cancel_grace:
            code = {"timed_out": exits.TIMED_OUT, "shutdown": exits.SHUTDOWN_FORCED}
            self.worker.end_now(running, code.get(running.reason or "", exits.LEASE_LOST))

    def _cancel(self, running: Running, reason: str, now: float) -> None:
        if running.cancelled_at is None:
            running.reason, running.cancelled_at = reason, now
            running.cancelled.set()
            event("job.cancelling", job=running.job.id, name=running.job.name, reason=reason)
