"""The worker's main thread: claim, run, settle, one job at a time.

A claim may take a batch (``claim_batch``); its jobs run one by one, each under its own
lease. Successes are written together when the batch ends (or every half second), failures
at once; every write is fenced on the lease and retried through a brief outage for up to
one lease, so an outage does not turn a success into a rerun. Between jobs the loop stops
when asked to, or when its supervisor is gone.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from setproctitle import setproctitle

from jobsup import exits
from jobsup.backoff import retry_in_for
from jobsup.clock import host_clock
from jobsup.errors import DatabaseError
from jobsup.observe.events import event
from jobsup.registry import lookup
from jobsup.store import Store
from jobsup.store.database import Database
from jobsup.store.dialects import Listener
from jobsup.store.rows import ClaimedJob, Lease
from jobsup.worker.execute import Outcome, execute
from jobsup.worker.lease import LeaseKeeper, Running
from jobsup.worker.spec import WorkerSpec
from jobsup.worker.stop import StopRequest

T = TypeVar("T")
FLUSH_EVERY = 0.5  # seconds a success may wait to be written with others


class Worker:
    def __init__(self, spec: WorkerSpec, db: Database, stop: StopRequest) -> None:
        self.spec, self.db, self.stop = spec, db, stop
        self.store = Store(db)
        self.settings = spec.settings
        self.poll_interval = self.settings.poll_interval or db.dialect.default_poll_interval
        self.batch = self.settings.claim_batch_of(spec.queue)
        self.keeper = LeaseKeeper(self)
        self.settle_lock = threading.Lock()
        self.successes: list[Lease] = []
        self.oldest_success = 0.0
        self.listener: Listener | None = None
        self.idle_backoff = 0.0

    def run(self) -> int:
        self.keeper.start()
        self.title("idle")
        event("worker.started", worker=self.spec.label, pid=os.getpid(), owner=self.spec.worker_id)
        while True:
            if self.stop.requested:
                return exits.STOPPED
            if os.getppid() != self.spec.supervisor_pid:
                return exits.PARENT_GONE
            claimed_at = time.monotonic()
            jobs = self.claim()
            if jobs:
                self.run_batch(jobs, claimed_at)
            else:
                self.idle()

    def claim(self) -> list[ClaimedJob]:
        try:
            jobs = self.store.job_claim(
                self.spec.queue, self.spec.worker_id, limit=self.batch, lease=self.settings.lease
            )
        except DatabaseError as exc:
            self.idle_backoff = min(max(0.5, self.idle_backoff * 2), 30.0)
            event("db.error", operation="claim", worker=self.spec.label, error=exc, retry_in=self.idle_backoff)
            return []
        self.idle_backoff = 0.0
        return jobs

    def idle(self) -> None:
        self.title("idle")
        listener = self.listen()
        fds = [self.stop.read_fd] + ([listener.fileno()] if listener is not None else [])
        select.select(fds, [], [], self.idle_backoff or self.poll_interval)
        self.stop.drain()
        if listener is not None:
            try:
                listener.drain()
            except DatabaseError:
                self.listener = None  # reconnect on the next idle wait

    def listen(self) -> Listener | None:
        if self.listener is None:
            try:
                self.listener = self.db.dialect.listener(self.db)
            except DatabaseError as exc:
                event("db.error", operation="listen", worker=self.spec.label, error=exc)
        return self.listener

    def run_batch(self, jobs: list[ClaimedJob], claimed_at: float) -> None:
        self.keeper.hold(jobs, claimed_at)
        for index, job in enumerate(jobs):
            if self.stop.requested:
                self.release(jobs[index:])
                break
            if not self.keeper.still_held(job.id):
                # Lost (cancelled, or expired and maybe running elsewhere) while it waited
                # in the batch: it must not start here.
                event("job.skipped", job=job.id, name=job.name, attempt=job.attempt, reason="lease lost")
                self.keeper.drop({job.id})
                continue
            self.run_one(job)
            if time.monotonic() - self.oldest_success >= FLUSH_EVERY:
                self.flush()
        self.flush()

    def run_one(self, job: ClaimedJob) -> None:
        running = Running(job, timeout=self.timeout_of(job))
        self.title(f"running {job.name} id={job.id} attempt={job.attempt}")
        waited = None if job.due_at is None else round((host_clock() - job.due_at).total_seconds(), 6)
        event(
            "job.started",
            job=job.id,
            name=job.name,
            attempt=job.attempt,
            queue=job.queue,
            worker=self.spec.label,
            waited=waited,
        )
        self.keeper.begin(running)
        outcome = execute(job, running.cancelled)
        self.keeper.end()
        running.seconds = time.monotonic() - running.started
        with self.settle_lock:
            if running.settled:
                return
            running.settled = True
        self.settle(running, outcome)

    def settle(self, running: Running, outcome: Outcome) -> None:
        job = running.job
        if outcome.kind == "succeeded":
            if not self.successes:
                self.oldest_success = time.monotonic()
            self.successes.append(job.lease)
            event("job.succeeded", **self.fields(running))
            return
        if running.reason == "shutdown":
            self.release([job])  # stopped by shutdown: this attempt does not count
            return
        kind = "timed_out" if running.reason == "timed_out" else "failed"
        error = outcome.error or kind
        if running.reason == "timed_out":
            error = f"timed out after {running.timeout:g}s; then {error}"
        delay = outcome.retry_in if outcome.retry_in is not None else retry_in_for(job.name, job.attempt)
        status = self.retrying(
            "settle",
            lambda: self.store.job_fail(
                job.lease, outcome=kind, error=error, retry_in=delay, discard=outcome.kind == "discarded"
            ),
        )
        self.keeper.drop({job.id})
        happened = "job.dead_lettered" if status == "dead_lettered" else "job.failed"
        event(happened, **self.fields(running), outcome=kind, error=error, stale=status is None)

    def flush(self) -> None:
        if not self.successes:
            return
        leases, self.successes = self.successes, []
        settled = self.retrying("settle", lambda: self.store.job_complete(leases))
        self.keeper.drop({lease.job_id for lease in leases})
        for lease in leases:
            if settled is not None and lease.job_id not in settled:
                event("job.settle_stale", job=lease.job_id, attempt=lease.attempt)

    def release(self, jobs: list[ClaimedJob]) -> None:
        for job in jobs:
            lease = job.lease
            released = self.retrying("release", lambda: self.store.job_release(lease))  # noqa: B023
            event(
                "job.released",
                job=job.id,
                name=job.name,
                attempt=job.attempt,
                queue=job.queue,
                stale=not released,
            )
        self.keeper.drop({job.id for job in jobs})

    def end_now(self, running: Running, code: int) -> None:
        """From the lease thread: record what can be recorded, then end the process. The
        writes get a bounded time: the database may be the reason we are here."""
        with self.settle_lock:
            if running.settled:
                return  # the main thread is already settling this job: it is not stuck
            running.settled = True
        job, fields = running.job, self.fields(running)
        writes: list[Callable[[], object]] = []
        if code == exits.TIMED_OUT:
            error = f"timed out after {running.timeout:g}s and ignored cancellation"
            retry_in = retry_in_for(job.name, job.attempt)
            writes.append(lambda: self.store.job_fail(job.lease, outcome="timed_out", error=error, retry_in=retry_in))
            event("job.failed", **fields, outcome="timed_out", error=error)
        elif code == exits.SHUTDOWN_FORCED:
            writes.append(lambda: self.store.job_release(job.lease))
            event("job.released", **fields)
        if self.successes:
            successes = list(self.successes)
            writes.append(lambda: self.store.job_complete(successes))

        def write_all() -> None:
            for write in writes:
                self.attempt_once(write)

        writer = threading.Thread(target=write_all, daemon=True)
        writer.start()
        writer.join(timeout=min(5.0, self.settings.heartbeat / 2))
        event("worker.ending", worker=self.spec.label, job=job.id, reason=exits.NAMES[code])
        logging.shutdown()
        os._exit(code)

    def retrying(self, operation: str, write: Callable[[], T]) -> T | None:
        """Retry a settling write through a brief outage, for up to one lease."""
        deadline, delay = time.monotonic() + self.settings.lease, 0.1
        while True:
            try:
                return write()
            except DatabaseError as exc:
                if time.monotonic() + delay > deadline:
                    event("db.error", operation=operation, error=exc, gave_up=True)
                    return None
                event("db.error", operation=operation, error=exc, retry_in=delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def attempt_once(self, write: Callable[[], object]) -> None:
        try:
            write()
        except DatabaseError as exc:
            event("db.error", operation="settle", error=exc)

    def fields(self, running: Running) -> dict[str, object]:
        """What every job event names: the job, its attempt, queue and worker, and its run time."""
        job = running.job
        return {
            "job": job.id,
            "name": job.name,
            "attempt": job.attempt,
            "queue": job.queue,
            "worker": self.spec.label,
            "seconds": None if running.seconds is None else round(running.seconds, 6),
        }

    def timeout_of(self, job: ClaimedJob) -> float | None:
        if job.timeout is not None:
            return job.timeout
        registered = lookup(job.name)
        if registered is not None and registered.timeout is not None:
            return registered.timeout
        return self.settings.timeout_of(self.spec.queue)

    def title(self, doing: str) -> None:
        setproctitle(f"jobsup: worker {self.spec.label} {doing}")
