"""A worker's own bookkeeping, on a real database and a real `Worker` run in this process
(no fork): the settler never writes a part of a batch twice, a claim is only forgotten by
itself, a job whose lease is stale is released rather than held, a new claim does not put
off the renewal of older leases, and a job type's broken `retry_in` cannot stop settling."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

import jobsup
from jobsup import exits
from jobsup.errors import DatabaseUnavailable
from jobsup.settings import QueueConfig, Settings
from jobsup.store import faults
from jobsup.store.database import Database
from jobsup.store.rows import FAILED, RELEASED, Outcome
from jobsup.worker.loop import Worker
from jobsup.worker.settler import BESIDE_AT_MOST
from jobsup.worker.slot import SlotTable
from jobsup.worker.spec import WorkerSpec
from jobsup.worker.stop import StopRequest

from helpers import claim, wait_until

OWNER = "test-host:default#1:bookkeeping"


def new_worker(url: str, *, queue: str = "default", lease: float = 60.0, heartbeat: float = 10.0) -> Worker:
    """A `Worker` of `queue` in this process, none of its threads started; its `db` is the
    caller's to dispose of."""
    settings = Settings(database_url=url, lease=lease, heartbeat=heartbeat, queues={queue: QueueConfig()})
    slot = SlotTable(1, 1).slot(0)
    slot.reset()
    spec = WorkerSpec(settings, queue, 1, OWNER, os.getppid())
    return Worker(spec, Database(url, role="worker"), StopRequest(), slot, None)


@pytest.fixture
def worker(url: str) -> Iterator[Worker]:
    worker = new_worker(url)
    yield worker
    worker.db.dispose()


def test_a_release_already_written_is_not_written_again_when_a_failure_is_retried(worker: Worker, url: str) -> None:
    client = jobsup.Client(url)
    failing, released = client.enqueue("a"), client.enqueue("a")
    a, b = claim(client, OWNER, limit=2)
    worker.keeper.hold([a, b], time.monotonic())
    # The failure's statement fails for its first 3 s; the release goes through at once.
    faults.install(worker.db.engine, "worker", "worker:settle@0s+3s")
    faults.install(worker.db.single, "worker", "worker:settle@0s+3s")
    worker.settler.add(a, Outcome(a.held, FAILED, "boom", retry_in=0.0))
    worker.settler.add(b, Outcome(b.held, RELEASED))
    writing = threading.Thread(target=worker.settler.write_here)
    writing.start()
    wait_until(lambda: client.get(released).status == "pending", timeout=10, what="the release")  # type: ignore[union-attr]
    [again] = claim(client, OWNER, limit=1)  # this worker claims the job anew: the same lease
    assert again.id == released and again.lease == b.lease
    worker.keeper.hold([again], time.monotonic())
    writing.join(10)
    assert client.get(failing).status == "pending"  # type: ignore[union-attr]  # the failure was written, retried
    assert client.get(released).status == "running"  # type: ignore[union-attr]  # the new claim was left alone
    assert worker.keeper.held.get(released) is again  # and this worker still holds it


def test_a_job_whose_lease_went_stale_while_it_waited_is_released(worker: Worker, url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("a")
    [job] = claim(client, OWNER)
    long_ago = time.monotonic() - worker.settings.lease  # as after an outage that stopped renewals
    worker.keeper.hold([job], long_ago)
    assert worker.keeper.begin(job, None) is None
    worker.settler.write_here()
    stored = client.get(job_id)
    assert stored is not None and (stored.status, stored.attempts) == ("pending", 0)
    assert job_id not in worker.keeper.held


def test_a_new_claim_does_not_put_off_the_renewal_of_older_leases(worker: Worker, url: str) -> None:
    client = jobsup.Client(url)
    client.enqueue_many([{"name": "a"}, {"name": "a"}])
    first, second = claim(client, OWNER), claim(client, OWNER)
    t0 = time.monotonic()
    worker.keeper.hold(first, t0)
    worker.keeper.hold(second, t0 + 0.9 * worker.settings.heartbeat)
    assert worker.keeper.next_renewal == t0 + worker.settings.heartbeat
    assert worker.keeper.renewed_at == t0  # the older lease sets how fresh they all are


def test_a_job_claimed_after_an_outage_is_judged_by_its_own_fresh_lease(worker: Worker, url: str) -> None:
    """An older lease (an outcome whose write waited through an outage) keeps the worker's
    last renewal back; a job claimed once the database answered again holds a fresh lease
    and must run, neither released, cancelled as lease lost, nor killed by the supervisor.
    (Found by the fault campaign on MariaDB: a success thrown away and run again.)"""
    client = jobsup.Client(url)
    client.enqueue_many([{"name": "a"}, {"name": "a"}])
    old, fresh = claim(client, OWNER, limit=1), claim(client, OWNER, limit=1)
    keeper, settings = worker.keeper, worker.settings
    now = time.monotonic()
    # Renewed before the outage: within two heartbeats of lapsing (not yet within one, when
    # the lease thread would end this process).
    stale = now - settings.lease + 1.5 * settings.heartbeat
    keeper.hold(old, stale)
    keeper.hold(fresh, now)
    assert keeper.renewed_at == stale
    running = keeper.begin(fresh[0], None)
    assert running is not None  # not released as stale
    keeper._enforce(running, time.monotonic())
    assert running.cancelled_at is None and running.reason is None  # not cancelled as lease lost
    # What the supervisor watches: the running job's lease as of its claim, not the renewal.
    assert worker.slot.leases() == [now]
    # Were the worker to end itself for another job, this one is a bystander with a fresh
    # lease: released, not charged as lease lost.
    keeper.bystanders()
    assert worker.slot.entries() == [(running.job.id, running.job.attempt, None, exits.SHUTDOWN_FORCED)]
    keeper.end(running)
    assert worker.slot.leases() == []
    # The older lease itself is still judged by its own last renewal: too stale to start.
    assert keeper.begin(old[0], None) is None


def test_a_renewal_that_ended_while_a_claim_was_on_its_way_does_not_vouch_for_its_leases(
    worker: Worker, url: str
) -> None:
    client = jobsup.Client(url)
    client.enqueue_many([{"name": "a"}, {"name": "a"}])
    keeper = worker.keeper
    keeper.hold(claim(client, OWNER, limit=1), time.monotonic())  # an older lease, still held
    began = time.monotonic()  # a claim begins: its clock is read from here on
    fresh = claim(client, OWNER, limit=1)
    keeper._renew(time.monotonic())  # a renewal begun and ended meanwhile: it did not renew `fresh`
    assert keeper.renewed_at > began
    renewal_due = keeper.next_renewal
    keeper.hold(fresh, began)
    assert keeper.renewed_at == began and worker.slot.renewed_at == began
    # The next renewal is due a heartbeat after the claim, not after the renewal that missed it.
    assert keeper.next_renewal == began + worker.settings.heartbeat < renewal_due


def test_a_retry_in_that_raises_falls_back_to_the_default_backoff(url: str) -> None:
    def broken(attempt: int) -> float:
        raise ZeroDivisionError("the job type's own bug")

    jobsup.job("retry-in-raises", retry_in=broken)(lambda ctx, payload: None)
    client = jobsup.Client(url)
    job_id = client.enqueue("retry-in-raises")
    [job] = claim(client, "w", limit=1)
    assert client.store.transitions.fail(Outcome(job.held, FAILED, "boom")) == "pending"
    stored = client.get(job_id)
    assert stored is not None and stored.run_at is not None and stored.status == "pending"


def test_a_claim_waits_while_a_release_of_its_worker_is_being_retried(worker: Worker, url: str) -> None:
    """A release that failed may have committed unseen; its retry would match this worker's
    new claim of the same job (a release gives the attempt back), so no claim runs meanwhile."""
    client = jobsup.Client(url)
    job_id = client.enqueue("a")
    [job] = claim(client, OWNER, limit=1)
    worker.keeper.hold([job], time.monotonic())
    armed = time.monotonic()
    for engine in (worker.db.engine, worker.db.single):
        faults.install(engine, "worker", "worker:release@0s+1s")  # its first tries fail
    worker.settler.add(job, Outcome(job.held, RELEASED))
    writing = threading.Thread(target=worker.settler.write_here)
    writing.start()
    wait_until(worker.settler.claim_lock.locked, timeout=5, what="the release to start")
    claimed = worker.claim()  # waits until the release is written, then claims the job anew
    writing.join(10)
    assert [j.id for j in claimed] == [job_id]
    # Its lease counts from when the claim began, after the wait: not a second stale already.
    assert claimed.began >= armed + 1.0
    assert [(a.attempt, a.outcome) for a in client.get(job_id).history] == [(1, "released"), (1, None)]  # type: ignore[union-attr]


def test_a_turn_whose_claim_waited_for_a_release_runs_the_jobs_it_claims(url: str) -> None:
    """The loop holds a claim's jobs from when the claim began (`Claimed.began`), not from
    before it waited for a release of its worker to be written: counted from before the wait,
    a wait past the lease's margin (the lease less two heartbeats) makes the fresh jobs look
    stale, and they are given back unrun."""
    worker = new_worker(url, lease=4.0, heartbeat=1.0)
    client = jobsup.Client(url)
    try:
        job_id = client.enqueue("bookkeeping-noop")
        lock = worker.settler.claim_lock
        lock.acquire()  # as a release of this worker's, retried through an outage, holds it
        released = threading.Timer(2.5, lock.release)  # past the margin of 4 - 2 x 1 s
        released.start()
        try:
            worker.turn()
            # The settler's thread is not started: its write, here (on SQLite `run_batch` wrote it).
            worker.settler.write_here()
        finally:
            released.join()
        assert client.get(job_id).status == "succeeded"  # type: ignore[union-attr]
    finally:
        client.close()
        worker.db.dispose()


def test_orphans_are_the_leases_the_worker_does_not_know(worker: Worker, url: str) -> None:
    client = jobsup.Client(url)
    known, orphan = client.enqueue("a"), client.enqueue("a")
    a, b = claim(client, OWNER, limit=2)
    worker.keeper.hold([a], time.monotonic())  # b's claim reply was "lost"
    worker.claim_unsure = True
    worker.release_orphans()
    assert client.get(known).status == "running" and client.get(orphan).status == "pending"  # type: ignore[union-attr]
    assert not worker.claim_unsure
    assert b.id == orphan


def test_burials_still_pending_at_shutdown_are_given_up_in_time(url: str) -> None:
    from jobsup.observe import events
    from jobsup.store.store import Store
    from jobsup.supervisor.burial import Burial, Burials

    db = Database(url)
    faults.install(db.engine, "supervisor", "supervisor:maintenance@0s+600s:hang")  # a dead connection
    faults.install(db.single, "supervisor", "supervisor:maintenance@0s+600s:hang")
    burials = Burials(Store(db).transitions)
    burials.add(Burial("gone:default#1:x", "default#1", {}, lapses_at=time.monotonic() + 600))  # its thread hangs
    seen: list[str] = []
    subscriber = events.subscribe(lambda kind, fields: seen.append(kind))
    try:
        started = time.monotonic()
        burials.finish(0.5)
        waited = time.monotonic() - started
    finally:
        events.unsubscribe(subscriber)
    assert "burial.abandoned" in seen
    assert waited < 5, "a hanging statement held up the shutdown"  # 0.5 s asked, 600 s of hang


@jobsup.job("rate-lost", queue="rate-lost", rate="1/1m")
def rate_lost(ctx: jobsup.JobContext, payload: object) -> None: ...


def test_a_later_claim_round_whose_reply_was_lost_gives_its_jobs_back_at_once(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim's second round (the rate window put a row back) commits, then its reply is
    lost: the worker looks for the lease it holds without knowing right away, rather than
    leaving it to lapse and be charged an attempt for a job that never started."""
    worker = new_worker(url, queue="rate-lost")
    client = jobsup.Client(url)
    first, _put_back = client.enqueue("rate-lost"), client.enqueue("rate-lost")
    plain = client.enqueue("rate-lost-plain", queue="rate-lost", allow_unknown=True)  # round 2 claims it
    dialect = worker.store.transitions.dialect
    real, rounds = dialect.claim, []

    def claim(db: Database, params: dict[str, object], after: object) -> object:
        rows = real(db, params, after)  # type: ignore[arg-type]
        rounds.append(len(rows))
        if len(rounds) == 2:
            raise DatabaseUnavailable("the reply to the COMMIT of claim round 2 was lost")
        return rows

    monkeypatch.setattr(dialect, "claim", claim)
    try:
        assert [job.id for job in worker.claim(limit=2)] == [first]
        assert rounds == [1, 1]
        monkeypatch.undo()
        after = client.get(plain)
        assert after is not None and after.status == "pending", "round 2's lease was left to lapse"
        assert [(a.attempt, a.outcome) for a in after.history] == [(1, "released")]
        assert not worker.claim_unsure
    finally:
        worker.db.dispose()


@jobsup.job("bookkeeping-noop")
def bookkeeping_noop(ctx: jobsup.JobContext, payload: object) -> None:
    """Succeeds: its outcome is the settler's to write."""


def writing_worker(url: str, fault: str) -> tuple[Database, Worker]:
    """A worker of the default queue with its settler's thread started (its lease threads
    not), whose settle writes meet `fault`."""
    worker = new_worker(url)
    worker.settler.start()
    for engine in (worker.db.engine, worker.db.single):
        faults.install(engine, "worker", fault)
    return worker.db, worker


@pytest.mark.parametrize("server", ["postgres_url", "mariadb_url"])
def test_a_claims_outcomes_are_written_beside_the_next_claim_and_no_further_behind(
    request: pytest.FixtureRequest, server: str
) -> None:
    """Where many write at once, a claim's outcomes are written by the settler's thread
    while the next claim runs; that claim's run then waits for the write before handing its
    own over. So a write that hangs holds the worker back, and a worker that dies leaves at
    most one claim's successes unwritten (to run again)."""
    url = str(request.getfixturevalue(server))
    client = jobsup.Client(url)
    first_id, second_id = client.enqueue_many([{"name": "bookkeeping-noop"}] * 2)
    db, worker = writing_worker(url, "worker:settle@0s+4s:hang")  # the first write hangs
    first = worker.claim(limit=1)
    assert [job.id for job in first] == [first_id]
    worker.run_batch(first, time.monotonic())  # handed over: the settler's thread writes it
    wait_until(lambda: worker.settler.writing == 1, timeout=5, what="the first claim's write to start")
    second = worker.claim(limit=1)  # beside that write
    assert [job.id for job in second] == [second_id]
    running = threading.Thread(target=worker.run_batch, args=(second, time.monotonic()))
    running.start()
    wait_until(lambda: worker.settler.draining == 1, timeout=5, what="the second claim's run to wait for the write")
    assert running.is_alive() and client.get(first_id).status == "running"  # type: ignore[union-attr]
    running.join(30)  # once the hang ends
    assert not running.is_alive()
    worker.settler.drain(timeout=30)
    assert [client.get(job_id).status for job_id in (first_id, second_id)] == ["succeeded"] * 2  # type: ignore[union-attr]
    client.close()
    db.dispose()


@pytest.mark.parametrize("server", ["postgres_url", "mariadb_url"])
def test_a_claim_larger_than_the_adaptive_most_is_written_before_the_next_claim(
    request: pytest.FixtureRequest, server: str
) -> None:
    """Beside the next claim only pays for small claims: a larger one (a `--claim-batch`
    above the adaptive most) has its outcomes written by the main thread, and where they
    cannot be sent behind the claim (MariaDB; here on PostgreSQL too, since fault injection
    watches the statements: `tests/test_settle_behind.py`) before `run_batch` returns, even
    when that write is slow."""
    url = str(request.getfixturevalue(server))
    client = jobsup.Client(url)
    ids = client.enqueue_many([{"name": "bookkeeping-noop"}] * (BESIDE_AT_MOST + 1))
    db, worker = writing_worker(url, "worker:settle@0s+2s:hang")  # the write is slow
    try:
        claimed = worker.claim(limit=BESIDE_AT_MOST + 1)
        assert sorted(job.id for job in claimed) == sorted(ids)
        # Outcomes that wait past FLUSH_EVERY meanwhile are the thread's to write (its write
        # hangs as long); the main thread's write waits for that one too.
        assert worker.run_batch(claimed, time.monotonic()) == len(ids)
        assert worker.settler.writing == 0 and not worker.settler.pending
        assert {client.get(job_id).status for job_id in ids} == {"succeeded"}  # type: ignore[union-attr]
    finally:
        client.close()
        db.dispose()


def test_every_claim_of_a_worker_reads_each_type_s_timeout_again(worker: Worker, url: str) -> None:
    """The per-type timeouts a worker keeps for one claim's jobs (`worker.timeouts`) are read
    again at its next claim, a batch's or a pool's (both claim through `Worker.claim`): a
    type's timeout published anew applies from then on, not never."""
    from jobsup.jobtypes import JobType, Resolver
    from jobsup.worker.timeouts import Timeouts

    published = {"bookkeeping-timed": JobType("bookkeeping-timed", timeout=9.0)}
    # Read at each look (ttl 0) where the worker's resolver caches for half a minute.
    worker.timeouts = Timeouts(Resolver(lambda: dict(published), ttl=0.0), queue_timeout=None)
    client = jobsup.Client(url)
    try:
        client.enqueue("bookkeeping-timed", allow_unknown=True)
        [first] = worker.claim(limit=1)
        assert worker.timeouts.of(first) == 9.0
        published["bookkeeping-timed"] = JobType("bookkeeping-timed", timeout=4.0)
        client.enqueue("bookkeeping-timed", allow_unknown=True)
        [second] = worker.claim(limit=1)
        assert worker.timeouts.of(second) == 4.0, "the claim kept the type's timeout of an earlier claim"
        worker.settler.release([first, second])
        worker.settler.write_here()
    finally:
        client.close()
