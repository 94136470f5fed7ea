"""A large claim's successes sent behind (`Settler.write_behind`): the write is sent at the
claim's end and its reply read at the next claim's end, so its commit overlaps the next
claim's jobs. On a real PostgreSQL, with a real `Worker` run in this process (its threads not
started, so that nothing but the test moves it), and the driver's own connections: the
reply is read back before every wait and on the way out, the leases of the jobs in flight
stay held until then, a lost reply is written again, fenced, and only successes go behind."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import BigInteger, bindparam, event, func, select, text
from sqlalchemy.dialects.postgresql import ARRAY

import jobsup
from jobsup import exits
from jobsup.errors import DatabaseUnavailable
from jobsup.settings import QueueConfig, Settings
from jobsup.store.database import Database
from jobsup.store.dialects.sent import PREPARED
from jobsup.store.rows import SUCCEEDED, ClaimedJob, Outcome
from jobsup.worker.loop import Worker
from jobsup.worker.settler import BESIDE_AT_MOST
from jobsup.worker.slot import SlotTable
from jobsup.worker.spec import WorkerSpec
from jobsup.worker.stop import StopRequest

from helpers import wait_until

OWNER = "test-host:default#1:behind"
LARGE = BESIDE_AT_MOST + 1  # the smallest claim whose successes go behind
STOPS: list[StopRequest] = []  # the stop request `behind-stop` makes, as SIGTERM would


@jobsup.job("behind-noop")
def noop(ctx: object, payload: object) -> None:
    return None


@jobsup.job("behind-stop")
def asks_to_stop(ctx: object, payload: object) -> None:
    STOPS[-1].requested_at = time.monotonic()


@pytest.fixture
def worker(postgres_url: str) -> Iterator[Worker]:
    settings = Settings(database_url=postgres_url, lease=60.0, heartbeat=10.0, queues={"default": QueueConfig()})
    slot = SlotTable(1, 1).slot(0)
    slot.reset()
    db = Database(postgres_url, role="worker")
    assert db.may_run_on_driver(), "something watches the statements: nothing would be sent behind"
    stop = StopRequest()
    STOPS.append(stop)
    made = Worker(WorkerSpec(settings, "default", 1, OWNER, os.getppid()), db, stop, slot, None)
    yield made
    made.settler.read_behind()  # a reply left unread: its connection back in the pool, idle
    db.dispose()


@pytest.fixture
def url(postgres_url: str) -> str:
    """PostgreSQL's alone (the conftest's `client` is on it): only there is a write sent behind."""
    return postgres_url


def run_claim(worker: Worker, limit: int = LARGE) -> list[ClaimedJob]:
    claimed = worker.claim(limit=limit)
    assert worker.run_batch(claimed, time.monotonic()) == len(claimed)
    return claimed


def statuses(client: jobsup.Client, ids: list[int]) -> list[str]:
    return [client.get(job_id).status for job_id in ids]  # type: ignore[union-attr]


def attempts(client: jobsup.Client, ids: list[int]) -> dict[int, list[tuple[int, str]]]:
    with client.store.db.read() as conn:
        rows = conn.execute(
            text("SELECT job_id, attempt, outcome FROM jobsup_job_attempt WHERE job_id = ANY(:ids) ORDER BY attempt"),
            {"ids": ids},
        ).all()
    found: dict[int, list[tuple[int, str]]] = {job_id: [] for job_id in ids}
    for job_id, attempt, outcome in rows:
        found[job_id].append((attempt, outcome))
    return found


def succeeded_events(seen: list[tuple[str, dict[str, Any]]]) -> list[int]:
    """The ids the `jobs.succeeded` events announced, in order."""
    return [job_id for kind, fields in seen if kind == "jobs.succeeded" for job_id, *_ in fields["each"]]


def test_a_large_claims_successes_commit_without_a_wait_and_are_announced_once_read_back(
    worker: Worker, client: jobsup.Client, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    ids = client.enqueue_many([{"name": "behind-noop"}] * LARGE)
    run_claim(worker)
    assert worker.settler.behind is not None, "the claim's successes were not sent behind"
    assert not worker.settler.pending and not succeeded_events(seen)  # sent, not read back
    assert worker.keeper.known_ids() == set(ids)  # their leases held (and renewed) meanwhile
    # The server commits what was sent, with nobody reading its reply.
    wait_until(lambda: set(statuses(client, ids)) == {"succeeded"}, timeout=10, what="the write sent behind")
    worker.settler.read_behind()
    assert worker.settler.behind is None and worker.keeper.known_ids() == set()
    assert sorted(succeeded_events(seen)) == sorted(ids)
    assert [fields.get("behind") for kind, fields in seen if kind == "jobs.succeeded"] == [True]  # said on its line
    assert attempts(client, ids) == {job_id: [(1, "succeeded")] for job_id in ids}


def test_the_next_claims_end_reads_the_reply_of_the_one_before(
    worker: Worker, client: jobsup.Client, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    first = client.enqueue_many([{"name": "behind-noop"}] * LARGE)
    run_claim(worker)
    second = client.enqueue_many([{"name": "behind-noop"}] * LARGE)
    run_claim(worker)
    # No write more than one claim behind: the first's is read, the second's is in flight.
    assert sorted(succeeded_events(seen)) == sorted(first)
    assert worker.keeper.known_ids() == set(second)
    assert worker.settler.behind is not None and [job.id for job, _ in worker.settler.behind[0]] == second


def test_a_claim_that_finds_nothing_reads_the_reply_before_the_worker_waits(
    worker: Worker, client: jobsup.Client, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    """The main loop reads the reply before it idles: a queue that ran dry would otherwise
    leave the last claim's successes unannounced (and their leases renewed) until more work came."""
    ids = client.enqueue_many([{"name": "behind-noop"}] * LARGE)
    run_claim(worker)
    worker.stop.requested_at = None
    announced_at_the_wait: list[list[int]] = []

    def idle(*also: int) -> None:  # the loop's wait: one empty look, then stop
        announced_at_the_wait.append(succeeded_events(seen))
        worker.stop.requested_at = time.monotonic()

    worker.idle = idle  # type: ignore[method-assign]
    worker.keeper.start = worker.settler.start = lambda: None  # type: ignore[method-assign]
    assert worker.run() == exits.STOPPED
    assert [sorted(announced) for announced in announced_at_the_wait] == [sorted(ids)]


def test_the_way_out_reads_the_reply_of_what_was_sent(
    worker: Worker, client: jobsup.Client, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    ids = client.enqueue_many([{"name": "behind-noop"}] * LARGE)
    run_claim(worker)
    assert worker.finish(exits.STOPPED) == exits.STOPPED
    assert worker.settler.behind is None and worker.keeper.known_ids() == set()
    assert sorted(succeeded_events(seen)) == sorted(ids)


def test_a_renewal_between_the_commit_and_the_read_forgets_the_jobs_and_the_read_announces_them_once(
    worker: Worker, client: jobsup.Client, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    ids = client.enqueue_many([{"name": "behind-noop"}] * LARGE)
    run_claim(worker)
    wait_until(lambda: set(statuses(client, ids)) == {"succeeded"}, timeout=10, what="the write sent behind")
    worker.keeper._renew(time.monotonic())  # the lease thread's renewal, between the commit and the read
    assert worker.keeper.known_ids() == set()  # gone from the database: forgotten, as any lease that is gone
    worker.settler.read_behind()
    kinds = [kind for kind, _ in seen]
    assert "job.lease_lost" not in kinds and "job.settle_stale" not in kinds
    assert sorted(succeeded_events(seen)) == sorted(ids)


def waiting_for_a_lock(conn: Any) -> list[int]:
    """The backends of this database waiting for a lock in a statement that writes attempts."""
    return list(
        conn.execute(
            text(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database() AND query LIKE '%jobsup_job_attempt%'"
            )
        ).scalars()
    )


@contextmanager
def a_write_waiting_for_a_lock(worker: Worker, client: jobsup.Client, url: str) -> Iterator[tuple[list[int], Any]]:
    """A claim run, its successes sent behind it, and the write waiting, uncommitted, for the
    lock on its last job's row that a transaction of the test's holds until it ends: the ids,
    and that transaction's connection."""
    ids = client.enqueue_many([{"name": "behind-noop"}] * LARGE)
    claimed = worker.claim(limit=LARGE)
    locker = Database(url)
    conn = locker.engine.connect()
    try:
        conn.begin()
        conn.execute(text("SELECT id FROM jobsup_job WHERE id = :id FOR UPDATE"), {"id": ids[-1]})
        worker.run_batch(claimed, time.monotonic())
        assert worker.settler.behind is not None
        wait_until(lambda: len(waiting_for_a_lock(conn)) == 1, timeout=10, what="the write to wait for the lock")
        yield ids, conn
    finally:
        conn.close()  # rolls back what is still open
        locker.dispose()


def test_a_drain_from_another_thread_reads_the_write_in_flight(
    worker: Worker, client: jobsup.Client, postgres_url: str, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    """The lease thread drains when it ends the process; the reply it reads is the main
    thread's write in flight."""
    with a_write_waiting_for_a_lock(worker, client, postgres_url) as (ids, conn):
        drained: list[bool] = []
        drain = threading.Thread(target=lambda: drained.append(worker.settler.drain(timeout=30)), daemon=True)
        drain.start()
        wait_until(lambda: worker.settler.writing == 1, timeout=10, what="the drain to read the reply")
        assert not drained and not succeeded_events(seen)
        conn.rollback()
        drain.join(30)
    assert drained == [True] and sorted(succeeded_events(seen)) == sorted(ids)
    assert worker.keeper.known_ids() == set() and set(statuses(client, ids)) == {"succeeded"}


def test_a_write_sent_while_a_drain_waits_is_read_before_the_drain_returns(
    worker: Worker, client: jobsup.Client, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    """The lease thread's drain looks for a write in flight, finds none, and the main thread
    sends one before the drain waits for the writes under way: the drain reads it too."""
    ids = client.enqueue_many([{"name": "behind-noop"}] * LARGE)
    claimed = worker.claim(limit=LARGE)
    first_look, sent = threading.Event(), threading.Event()
    read_behind, waited = worker.settler.read_behind, list[bool]()

    def drains_first_look(deadline: float | None = None) -> bool:
        found = read_behind(deadline)
        if threading.current_thread() is drain and not first_look.is_set():
            first_look.set()
            waited.append(sent.wait(10))  # the window: the main thread's claim ends, its write sent, now
        return found

    worker.settler.read_behind = drains_first_look  # type: ignore[method-assign]
    drained: list[bool] = []
    drain = threading.Thread(target=lambda: drained.append(worker.settler.drain(timeout=30)), daemon=True)
    drain.start()
    assert first_look.wait(10)
    worker.run_batch(claimed, time.monotonic())  # sent behind: no drain was waiting yet to read it
    sent.set()
    drain.join(30)
    assert waited == [True] and drained == [True] and worker.settler.behind is None
    assert sorted(succeeded_events(seen)) == sorted(ids) and worker.keeper.known_ids() == set()


def test_a_drain_with_a_deadline_stops_waiting_for_the_reply_then_and_leaves_the_leases_held(
    worker: Worker, client: jobsup.Client, postgres_url: str
) -> None:
    """A worker ending itself (a job that will not stop) drains for a bounded time: a reply
    that does not come by then is not waited for, nor written again; the leases stay held,
    for the supervisor to give back once the process is gone."""
    with a_write_waiting_for_a_lock(worker, client, postgres_url) as (ids, _):
        drained: list[bool] = []
        drain = threading.Thread(target=lambda: drained.append(worker.settler.drain(timeout=0.3)), daemon=True)
        drain.start()
        drain.join(10)  # were the deadline not kept, the drain would wait for the lock, for ever
        assert not drain.is_alive() and drained == [False]
        assert worker.settler.behind is None and worker.settler.writing == 0
        assert worker.keeper.known_ids() == set(ids)
        assert worker.db.single.pool.checkedout() == 0  # type: ignore[attr-defined]  # the connection given up went back to the pool


def test_a_write_whose_connection_is_lost_before_it_commits_is_written_again(
    worker: Worker, client: jobsup.Client, postgres_url: str, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    with a_write_waiting_for_a_lock(worker, client, postgres_url) as (ids, conn):
        conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": waiting_for_a_lock(conn)[0]})
        conn.rollback()
        worker.settler.read_behind()  # the reply is lost: written again, in line
    assert any(kind == "db.error" and fields["operation"] == "settle" for kind, fields in seen)
    assert set(statuses(client, ids)) == {"succeeded"}
    assert attempts(client, ids) == {job_id: [(1, "succeeded")] for job_id in ids}
    assert sorted(succeeded_events(seen)) == sorted(ids) and worker.keeper.known_ids() == set()


def test_a_write_that_committed_with_its_reply_lost_is_written_again_and_settles_nothing_twice(
    worker: Worker, client: jobsup.Client, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    ids = client.enqueue_many([{"name": "behind-noop"}] * LARGE)
    run_claim(worker)
    assert worker.settler.behind is not None
    batch, read = worker.settler.behind

    def reply_lost(deadline: float | None) -> set[int]:  # committed; the connection broke before its reply came
        read(deadline)
        raise DatabaseUnavailable("the connection was lost")

    worker.settler.behind = (batch, reply_lost)
    worker.settler.read_behind()
    assert set(statuses(client, ids)) == {"succeeded"}
    assert attempts(client, ids) == {job_id: [(1, "succeeded")] for job_id in ids}  # fenced: no attempt twice
    stale = sorted(fields["job"] for kind, fields in seen if kind == "job.settle_stale")
    assert stale == sorted(ids) and worker.keeper.known_ids() == set()


def test_a_claim_with_a_release_is_written_before_the_next_claim(worker: Worker, client: jobsup.Client) -> None:
    """Only successes go behind: a release in flight could meet this worker's next claim of
    the same job, which takes the same lease (`Settler.claim_lock`)."""
    ids = client.enqueue_many(
        [{"name": "behind-noop"}] * (LARGE - 2) + [{"name": "behind-stop"}, {"name": "behind-noop"}]
    )
    claimed = worker.claim(limit=LARGE)
    assert [job.id for job in claimed] == ids
    assert worker.run_batch(claimed, time.monotonic()) == LARGE - 1  # the last one never started
    assert worker.settler.behind is None and not worker.settler.pending
    assert statuses(client, ids) == ["succeeded"] * (LARGE - 1) + ["pending"]
    assert worker.keeper.known_ids() == set()


def test_a_statement_sent_behind_is_prepared_once_per_connection_and_types(postgres_url: str) -> None:
    """psycopg sends a list of small ints as int2[] and of large ones as int8[]: each list of
    types has its own prepared statement on the connection, each reused."""
    from jobsup.store.dialects.drivertext import DriverText
    from jobsup.store.dialects.sent import send

    statement = DriverText.of(select(func.cardinality(bindparam("p_ids", type_=ARRAY(BigInteger))).label("n")))
    numbered = statement.numbered()
    db = Database(postgres_url)
    try:
        for ids in ([1, 2], [2**40], [3, 4, 5], [2**41, 7]):
            sent = send(db, "read", statement, numbered, {"p_ids": ids})
            assert sent is not None and sent.rows() == [(len(ids),)]
        with db.single.connect() as conn:  # the one connection of its pool: the same session, usable after
            names = conn.exec_driver_sql("SELECT name FROM pg_prepared_statements").scalars().all()
        assert sorted(name for name in names if name.startswith("jobsup_sent")) == ["jobsup_sent_0", "jobsup_sent_1"]
    finally:
        db.dispose()


def test_a_statement_the_server_refuses_is_raised_when_its_reply_is_read(postgres_url: str) -> None:
    from jobsup.errors import DatabaseError
    from jobsup.store.dialects.drivertext import DriverText
    from jobsup.store.dialects.sent import send

    statement = DriverText.of(select((bindparam("p_n", type_=BigInteger) / 0).label("n")))
    db = Database(postgres_url)
    try:
        sent = send(db, "read", statement, statement.numbered(), {"p_n": 1})
        assert sent is not None
        with pytest.raises(DatabaseError, match="division by zero"):
            sent.rows()
        again = send(db, "read", statement, statement.numbered(), {"p_n": 2})  # the pool still serves
        assert again is not None
        with pytest.raises(DatabaseError, match="division by zero"):
            again.rows()
    finally:
        db.dispose()


def test_nothing_is_sent_where_something_watches_the_statements(
    worker: Worker, client: jobsup.Client, postgres_url: str
) -> None:
    """Fault injection (and a tracer) watch SQLAlchemy's execution: there the write runs in
    line, where they see it."""
    from jobsup.store import faults

    ids = client.enqueue_many([{"name": "behind-noop"}] * LARGE)
    claimed = worker.claim(limit=LARGE)
    faults.install(worker.db.single, "worker", "worker:renew@0s+1s")  # any listener will do
    worker.run_batch(claimed, time.monotonic())
    assert worker.settler.behind is None
    assert set(statuses(client, ids)) == {"succeeded"} and worker.keeper.known_ids() == set()


def test_a_success_outcome_alone_is_what_send_complete_takes(worker: Worker, client: jobsup.Client) -> None:
    """`Transitions.send_complete` sends one statement and the call it returns reads it."""
    ids = client.enqueue_many([{"name": "behind-noop"}] * 3)
    claimed = worker.claim(limit=3)
    read = worker.store.transitions.send_complete([Outcome(job.held, SUCCEEDED, worker="t") for job in claimed])
    assert read is not None and read(None) == set(ids)


def test_a_worker_s_writes_sent_behind_go_out_on_one_connection_of_its_pool(
    worker: Worker, client: jobsup.Client
) -> None:
    """The pool lends the connection given back last: the write sent behind and the claim
    each keep to a connection of their own, so each statement is prepared, and planned for
    its first values (slower on a young table), on one connection, not on both in turn."""
    lent: list[Any] = []  # each checkout's connection record, whose `info` says what `sent` prepared on it

    def checked_out(dbapi_connection: object, record: Any, proxy: object) -> None:
        lent.append(record)

    event.listen(worker.db.single, "checkout", checked_out)
    try:
        for _ in range(4):
            client.enqueue_many([{"name": "behind-noop"}] * LARGE)
            run_claim(worker)
        worker.settler.read_behind()
    finally:
        event.remove(worker.db.single, "checkout", checked_out)
    records = {id(record): record for record in lent}.values()
    assert len(records) >= 2  # the claims and the writes sent behind ran at once
    assert [bool(record.info.get(PREPARED)) for record in records].count(True) == 1
