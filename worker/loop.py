"""The worker's main thread: claim, run, hand the outcome over.

A claim takes as many jobs as `jobsup.worker.claimsize` says (one while the queue is shallow, more for a
backlog of short jobs, or a fixed ``claim_batch``); a batch's jobs run one by one, each under its own lease,
and the jobs still waiting are released if the one running takes long (see `jobsup.worker.lease`). With a
queue's ``concurrency`` above one, `run_concurrently` claims for its free places (and, for short jobs,
ahead: `jobsup.worker.ahead`) and runs them at once in its pool (`jobsup.worker.pool`). Every write goes
through the settler (`jobsup.worker.settler`): a failure at once, successes and releases in the
background or before the next claim. Between jobs the loop stops when asked to, or when its supervisor
is gone; on the way out it releases what it has not started and waits for its writes.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Sequence
from typing import NoReturn

from setproctitle import setproctitle

from jobsup import exits
from jobsup.clock import host_clock
from jobsup.errors import DatabaseError
from jobsup.observe import metrics, tracing
from jobsup.observe.events import emit
from jobsup.store.claim import Claimed
from jobsup.store.database import Database
from jobsup.store.dialects import Listener, OwnerLock
from jobsup.store.rows import FAILED, RELEASED, SUCCEEDED, TIMED_OUT, ClaimedJob
from jobsup.store.store import Store
from jobsup.worker.ahead import Ahead
from jobsup.worker.aio import EventLoop
from jobsup.worker.claimsize import ClaimSize
from jobsup.worker.execute import Ran, call, call_async, outcome_of, prepare
from jobsup.worker.lease import LeaseKeeper, Running
from jobsup.worker.pool import Pool
from jobsup.worker.services import JobServices
from jobsup.worker.settler import BESIDE_AT_MOST, Settler
from jobsup.worker.slot import Slot
from jobsup.worker.spec import WorkerSpec
from jobsup.worker.starts import Starts
from jobsup.worker.stop import StopRequest
from jobsup.worker.timeouts import Timeouts

LOOK_EVERY = 0.25  # seconds between looks at stop and the parent while a claim waits
# A pool working through a backlog with under a quarter of its places free and no job claimed
# ahead waits up to this long for more to free before it claims for them (`run_concurrently`).
FILL_WAIT = 0.02
# After a wakeup whose claim found nothing, the worker looks again after this, then twice
# as long each time up to RELOOK_UNTIL: on SQLite an enqueue in the caller's own transaction
# pokes just before its COMMIT (SQLAlchemy Core has no later event).
RELOOK_AFTER, RELOOK_UNTIL = 0.02, 1.0
# A worker nothing can wake (PostgreSQL behind a pooler without listen_url, listen_url=off)
# looks at least this often, unless poll_interval is set.
UNWOKEN_POLL = 1.0


class Worker:
    def __init__(
        self, spec: WorkerSpec, db: Database, stop: StopRequest, slot: Slot, owner_lock: OwnerLock | None
    ) -> None:
        self.spec, self.db, self.stop, self.slot, self.label = spec, db, stop, slot, spec.label
        self.owner_lock = owner_lock  # proof of life for the lease sweep (SQLite), held until we exit
        self.store = Store(db, holds_leases=True)
        self.settings = spec.settings
        given = self.settings.poll_interval
        self.poll_interval = db.dialect.default_poll_interval if given is None else given
        self.unwoken_poll = min(self.poll_interval, UNWOKEN_POLL) if given is None else given
        self.timeouts = Timeouts(self.store.resolver, self.settings.timeout_of(spec.queue))
        self.aio = EventLoop()  # for async def jobs, started with the first
        concurrency = self.settings.concurrency_of(spec.queue)
        self.services = JobServices(self.store)
        self.pool = Pool(concurrency, self.aio, self.services) if concurrency > 1 else None
        given = self.settings.claim_batch_of(spec.queue)
        # A rate window counts a start at the claim, but a batch's jobs run one after another:
        # those behind a slow one would start later than counted, beside the next period's.
        # One at a time, every job starts as it is counted. (A pool starts all it claims at once, and
        # claims nothing ahead on such a queue: `jobsup.worker.ahead`.)
        rated = self.pool is None and self.store.resolver.rate_limited(spec.queue)
        if rated and given is not None and given > 1:
            emit("worker.claim_batch_limited", worker=spec.label, queue=spec.queue, claim_batch=given)
        self.claim_size = ClaimSize(given, one_at_a_time=rated)
        # Where many write at once a claim of up to BESIDE_AT_MOST jobs hands its outcomes to
        # the settler's thread, so the next claim overlaps the write (docs/explanation/
        # performance.md, "The settle beside the next claim"); a larger claim's successes are sent
        # behind it (`Settler.write_behind`); with one writer (SQLite), written before the next claim.
        self.one_writer = db.dialect.one_writer
        self.ending = threading.Event()  # set by the lease thread when it ends the process
        self.starts = Starts(self.label)
        # The settler tells the keeper which leases it may forget (the keeper is made next).
        self.settler = Settler(
            self.store.transitions,
            lease=self.settings.lease,
            label=spec.label,
            written=lambda jobs: self.keeper.drop(jobs),
        )
        self.keeper = LeaseKeeper(
            spec,
            self.store.transitions,
            slot,
            stop,
            self.settler,
            ending=self.ending,
            pooled=self.pool is not None,
            end_now=self.end_now,
            title=self.title,
            announce_starts=lambda: self.starts.announce_held(ended=False),
        )
        self.listener: Listener | None = None
        self.idle_backoff = 0.0
        self.relook: float | None = None  # a wakeup found nothing yet: look again this soon
        self.claim_unsure = False  # a claim failed: it may have committed unseen

    def run(self) -> int:
        metrics.defer_job_samples()  # written by the lease thread every tick
        self.keeper.start()
        self.settler.start()
        self.title("idle")
        emit("worker.started", worker=self.label, pid=os.getpid(), owner=self.spec.worker_id)
        try:
            if self.pool is not None:
                return self.run_concurrently(self.pool)
            while True:
                if self.stop.requested:
                    return self.finish(exits.STOPPED)
                if os.getppid() != self.spec.supervisor_pid:
                    return self.finish(exits.PARENT_GONE)
                if self.ending.is_set():
                    # The lease thread is ending the process: claim nothing; leave it the GIL to drain writes.
                    time.sleep(3600)
                    continue
                self.turn()
        except BaseException:
            # A crash: what was already finished is still written, for a bounded time.
            self.starts.announce_held()
            self.settler.release(self.keeper.take_waiting())
            self.settler.drain(timeout=min(5.0, self.settings.heartbeat / 2))
            metrics.write_deferred()
            raise

    def turn(self) -> None:
        """One turn of the loop: claim, run what came (or wait for work, if nothing did)."""
        started = time.monotonic()  # how long the turn took, for the claim's size
        jobs = self.claim()
        # Its leases count from the claim's start, not from before it waited for a release.
        ran = self.run_batch(jobs, jobs.began) if jobs else 0
        self.claim_size.after(len(jobs), ran, time.monotonic() - started)
        if jobs:
            self.relook = None
        else:
            self.settler.read_behind()  # before a wait: the last claim's successes announced
            self.due_again(jobs)
            self.idle()

    def claim(self, limit: int | None = None) -> Claimed:
        lock = self.settler.claim_lock
        while not lock.acquire(timeout=LOOK_EVERY):  # a release of ours is being written
            if self.stop.requested or os.getppid() != self.spec.supervisor_pid:
                return Claimed()
        try:
            if self.claim_unsure:
                self.release_orphans()
            with tracing.span("jobsup.claim", {"jobsup.queue": self.spec.queue}):
                jobs = self.store.transitions.claim(
                    self.spec.queue, self.spec.worker_id, limit=limit or self.claim_size.size, lease=self.settings.lease
                )
            if jobs.unsure:
                # A later round failed and may have committed unseen: look for its leases now, not at
                # the next claim, which the jobs this one returned may put off for longer than a lease.
                self.claim_unsure = True
                try:
                    self.release_orphans(also=jobs)
                except DatabaseError as exc:  # still unsure: the next claim looks again
                    emit("db.error", operation="claim", worker=self.label, error=exc)
        except DatabaseError as exc:
            # The claim may have committed with its reply lost: its leases would be this worker's without
            # its knowing, unrenewed, so they are looked for once the database answers, well before they could lapse.
            self.claim_unsure = True
            self.idle_backoff = min(max(0.5, self.idle_backoff * 2), 30.0, self.settings.heartbeat)
            emit("db.error", operation="claim", worker=self.label, error=exc, retry_in=self.idle_backoff)
            return Claimed()
        finally:
            lock.release()
        self.idle_backoff = 0.0
        if jobs:
            self.timeouts.claimed()  # each type's timeout is read again for what this claim brings
        return jobs

    def due_again(self, claimed: Claimed) -> None:
        """A claim that put jobs back (a rate window with no room) says when the first is due
        again: look then, not at the next poll, which may be seconds later."""
        if claimed.next_due is not None:
            self.relook = max(RELOOK_AFTER, min((claimed.next_due - host_clock()).total_seconds(), self.poll_interval))

    def release_orphans(self, also: Sequence[ClaimedJob] = ()) -> None:
        """Release the leases this worker holds in the database but not in its bookkeeping
        (a claim whose reply was lost), nor among `also` (a claim's jobs not yet held): those
        jobs never started here."""
        known = self.keeper.known_ids() | {job.id for job in also}  # before the read: only this thread claims
        released = self.store.transitions.sweep.release_orphans(self.spec.worker_id, known)
        self.claim_unsure = False
        if released:
            emit("worker.orphans_released", worker=self.label, jobs=released)

    def idle(self, *also: int) -> None:
        """Wait for work (or for `also`, more file descriptors)."""
        if not also:
            self.title("idle")
        listener = self.listen()
        fds = [self.stop.read_fd, *also] + ([listener.fileno()] if listener is not None else [])
        wait = self.idle_backoff or (self.poll_interval if listener is not None else self.unwoken_poll)
        if self.relook is not None and not self.idle_backoff:
            wait, self.relook = min(wait, self.relook), (self.relook * 2 if self.relook < RELOOK_UNTIL else None)
        select.select(fds, [], [], wait)
        self.stop.drain()
        if listener is not None:
            try:
                listener.drain()
            except DatabaseError as exc:
                emit("db.error", operation="listen", worker=self.label, error=exc)
                self.close_listener()  # reconnect on the next idle wait
            else:
                if listener.early:
                    self.relook = RELOOK_AFTER

    def listen(self) -> Listener | None:
        if self.listener is not None and not self.listener.present:
            self.close_listener()  # pokers can no longer find it
        if self.listener is None:
            try:
                self.listener = self.db.dialect.listener(self.db, self.spec.queue)
            except DatabaseError as exc:
                emit("db.error", operation="listen", worker=self.label, error=exc)
        return self.listener

    def close_listener(self) -> None:
        if self.listener is not None:
            listener, self.listener = self.listener, None
            with contextlib.suppress(DatabaseError):
                listener.close()

    def run_batch(self, jobs: list[ClaimedJob], claimed_at: float) -> int:
        """Run a claim's jobs one by one; return how many ran here."""
        self.keeper.hold(jobs, claimed_at)
        self.starts.batch()
        ran, failing = 0, set()  # types with a breaker that failed in this batch (the rest goes back)
        for job in jobs:
            if self.stop.requested:
                break
            if job.name in failing:  # its breaker may be open now: the next claim decides
                continue
            running = self.keeper.begin(job, self.timeouts.of(job), named=len(jobs) == 1)
            if running is None:
                # Released, cancelled or lost while it waited in the batch: not here.
                emit("job.skipped", job=job.id, name=job.name, attempt=job.attempt)
                continue
            if self.run_one(running) not in (SUCCEEDED, RELEASED) and self.store.resolver.breaker_of(job.name):
                failing.add(job.name)
            ran += 1
        self.starts.announce_held()
        self.settler.release(self.keeper.take_waiting())
        if self.one_writer:
            self.settler.write_here()
        elif len(jobs) > BESIDE_AT_MOST:
            self.settler.write_behind()
        else:
            self.settler.flush_after_writes()
        return ran

    def run_one(self, running: Running) -> str:
        """Run one job and hand its outcome over; return the outcome's kind."""
        job = running.job
        self.starts.announce(running)
        with running.traced.current():
            prepared = prepare(job, running.cancelled, self.services)
            if isinstance(prepared, Ran):
                ran = prepared
            elif prepared.is_async:
                future, cancel = self.aio.submit(call_async(job, prepared))  # the task takes this context
                running.hook(cancel)
                ran = future.result()
            else:
                ran = call(job, prepared)
        return self.settle(running, ran)

    def settle(self, running: Running, ran: Ran) -> str:
        job = running.job
        running.returned = True
        self.services.finished(job)
        seconds = time.monotonic() - running.started
        outcome = outcome_of(job, ran, running.reason, running.timeout, seconds=seconds, worker=self.label)
        if outcome.kind in (SUCCEEDED, RELEASED):
            self.keeper.end(running)  # should the worker die now, the job is released, not charged
            self.settler.add(job, outcome)  # written with others, later: not the run's child
        else:
            with running.traced.current():  # a failure's settle, written here, is the run's child
                self.settler.write_now(job, outcome)  # the slot says "running" until it is written
            self.keeper.end(running)
        running.traced.end(outcome.kind, outcome.error)
        return outcome.kind

    def run_concurrently(self, pool: Pool) -> int:
        """Up to the pool's size at once: claim what fits (and some ahead), start it, settle
        each job as its call returns. Asked to stop (or orphaned), it claims nothing more, gives
        back what it claimed ahead and waits for the jobs running (cancelled after the grace)."""
        code, rated = None, self.store.resolver.rate_limited(self.spec.queue)
        ahead = Ahead(self.keeper, self.settler, self.starts, self.timeouts.of, size=pool.size, allowed=not rated)
        free_since: float | None = None  # when places first stood free, unclaimed
        backlog = False  # the last claim filled every place it asked for: more may be waiting
        while True:
            if code is None and self.stop.requested:
                code = exits.STOPPED
            elif code is None and os.getppid() != self.spec.supervisor_pid:
                code = exits.PARENT_GONE
            if code is not None:
                ahead.give_back()
                if not pool.running:
                    return self.finish(code)
            jobs = Claimed()
            wanted = pool.free + (max(0, ahead.depth - len(ahead)) if backlog else 0)  # ahead amid a backlog only
            claiming, hold = code is None and bool(wanted) and not self.ending.is_set(), 0.0
            if claiming and backlog and ahead:
                # Jobs claimed ahead fill the places that free: claim again once half the
                # pool's worth is due, so that one claim fills many.
                claiming = 2 * wanted >= pool.size
            elif claiming and backlog and 4 * wanted < pool.size:
                # Under a quarter of the places free, none claimed ahead: a moment for more, so one
                # claim fills several (a claim per freed place was most of a busy pool's CPU).
                now = time.monotonic()
                free_since = now if free_since is None else free_since
                hold = free_since + FILL_WAIT - now
                claiming = hold <= 0
            if claiming:
                free_since = None
                jobs = self.claim(limit=wanted)
                backlog = len(jobs) == wanted
                if jobs:
                    self.relook = None
                    self.keeper.hold(jobs, jobs.began)
                    ahead.add(jobs)
                    ahead.start(pool)
                self.due_again(jobs)
                self.title(f"running {pool.running} of {pool.size}" + (f", {len(ahead)} ahead" if ahead else ""))
            # More may be waiting when the claim filled every free place: look again as soon
            # as one frees (or after the hold above); otherwise wait for work too.
            for_work = code is None and bool(pool.free) and len(jobs) < wanted and hold <= 0
            self.wait(pool, for_work=for_work, timeout=hold if hold > 0 else LOOK_EVERY)
            for running, ran in pool.collect():
                ahead.ran(time.monotonic() - running.started)
                failed = self.settle(running, ran) in (FAILED, TIMED_OUT)  # what a breaker counts
                if failed and ahead and self.store.resolver.breaker_of(running.job.name):  # open now?
                    ahead.give_back(running.job.name)
            if code is None and not self.stop.requested:  # asked to stop: the next turn gives them back
                ahead.start(pool)  # the places just freed, before a write here
            if self.one_writer:
                self.settler.write_here()

    def wait(self, pool: Pool, *, for_work: bool, timeout: float = LOOK_EVERY) -> None:
        if for_work:
            self.idle(pool.read_fd)
            return
        select.select([self.stop.read_fd, pool.read_fd], [], [], timeout)
        self.stop.drain()

    def finish(self, code: int) -> int:
        """On the way out: everything handed over is written (for up to one lease), and the
        leases of a claim whose reply was lost are given back."""
        self.settler.drain()
        metrics.defer_job_samples(False)  # written now, and from here at once
        self.close_listener()
        if self.claim_unsure:
            try:
                self.release_orphans()
            except DatabaseError as exc:  # the sweep gives them back once they lapse
                emit("db.error", operation="claim", worker=self.label, error=exc)
        if self.owner_lock is not None:
            self.owner_lock.release()  # no lease left to protect
        return code

    def end_now(self, running: Running, code: int) -> NoReturn:
        """From the lease thread, for a job that will not stop: end the process. Nothing is
        written about that job here, since it still runs until the process is gone; the
        supervisor writes it once it has reaped this process (the exit code says what). The
        jobs still waiting are released and finished outcomes written, for a bounded time:
        the database may be why we are here."""
        self.ending.set()
        self.keeper.bystanders()
        self.settler.release(self.keeper.take_waiting())
        self.settler.drain(timeout=min(5.0, self.settings.heartbeat / 2))
        self.starts.announce_held()
        metrics.write_deferred()
        emit("worker.ending", worker=self.label, job=running.job.id, reason=exits.NAMES[code])
        exits.now(code)

    def title(self, doing: str) -> None:
        setproctitle(f"jobsup: worker {self.label} {doing}")
