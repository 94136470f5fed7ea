"""The state machine on every real database: enqueue, claim, settle, fence, dead letters."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, event, func, select

import jobsup
from jobsup.store.rows import CANCELLED, LEASE_EXPIRED, SUCCEEDED, TIMED_OUT, ClaimedJob, Held, Lease, Outcome
from jobsup.store.schema import job, job_attempt

from helpers import claim, claim_one, fail, held, release, succeed

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def count_jobs(client: jobsup.Client) -> int:
    with client.database.read() as conn:
        return int(conn.execute(select(func.count()).select_from(job)).scalar_one())


def test_enqueue_then_get_shows_the_stored_job(client: jobsup.Client) -> None:
    job_id = client.enqueue("send-email", {"to": "a@example.com"}, actor="alice", priority=3)
    stored = client.get(job_id)
    assert stored is not None
    assert (stored.name, stored.queue, stored.status, stored.priority) == (
        "send-email",
        "default",
        "pending",
        3,
    )
    assert stored.payload == {"to": "a@example.com"}
    assert (stored.attempts, stored.max_attempts, stored.actor) == (0, 5, "alice")
    assert stored.history == ()
    assert client.get(job_id + 1000) is None


def test_enqueue_uses_a_local_registration_for_defaults(client: jobsup.Client) -> None:
    @jobsup.job("registered-for-defaults", queue="mail", max_attempts=9, timeout="90s")
    def send(ctx: jobsup.JobContext, payload: object) -> None: ...

    stored = client.get(client.enqueue("registered-for-defaults"))
    assert stored is not None
    assert (stored.queue, stored.max_attempts, stored.timeout) == ("mail", 9, 90.0)


def test_claim_takes_due_jobs_by_priority_then_age(client: jobsup.Client) -> None:
    low = client.enqueue("a", 1, priority=0)
    high = client.enqueue("a", 2, priority=5)
    later = client.enqueue("a", 3, priority=9, run_at=T0 + timedelta(days=3650))
    other_queue = client.enqueue("a", 4, queue="mail", priority=9)
    claimed = claim(client, "w1", limit=10)
    assert [c.id for c in claimed] == [high, low]
    assert all(c.attempt == 1 and c.owner == "w1" for c in claimed)
    assert client.get(later).status == "pending"  # type: ignore[union-attr]
    assert client.get(other_queue).status == "pending"  # type: ignore[union-attr]
    assert claim(client, "w2", limit=10) == []


def test_delay_and_run_at_hold_a_job_back_until_due(client: jobsup.Client) -> None:
    now = datetime.now(UTC)
    delayed = client.enqueue("a", delay="1h")
    scheduled = client.enqueue("a", run_at=now + timedelta(minutes=5))
    assert claim(client, "w1", limit=10) == []
    due = claim(client, "w1", limit=10, now=now + timedelta(hours=2))
    assert {c.id for c in due} == {delayed, scheduled}


def test_complete_settles_job_and_attempt(client: jobsup.Client) -> None:
    job_id = client.enqueue("a")
    claimed = claim_one(client)
    assert succeed(client, [claimed]) == {job_id}
    stored = client.get(job_id)
    assert stored is not None and stored.status == "succeeded" and stored.finished_at is not None
    assert [(a.attempt, a.outcome, a.owner) for a in stored.history] == [(1, "succeeded", "w1")]


def test_a_batch_whose_jobs_return_different_values_keeps_each_result(client: jobsup.Client) -> None:
    # Texts an array literal must quote (PostgreSQL binds the results as one): quotes,
    # backslashes, commas, braces, the word NULL, spaces, non-ASCII.
    awkward = ['"a \\"b\\" {c}, NULL"', '"\\\\ back\\\\slash"', '["NULL", null, " "]', '"é ✓"']
    results = [None, "1", '{"n": 2}', "1", '"three"', *awkward]
    ids = client.enqueue_many([{"name": "a"} for _ in results])
    claimed = claim(client, "w1", limit=len(results))
    outcomes = [Outcome(held(c), SUCCEEDED, result=r) for c, r in zip(claimed, results, strict=True)]
    assert client.store.transitions.complete(outcomes) == set(ids)
    stored = {c.id: r for c, r in zip(claimed, results, strict=True)}
    assert {job_id: _result(client, job_id) for job_id in ids} == {
        job_id: None if text is None else json.loads(text) for job_id, text in stored.items()
    }


def test_one_settle_of_valid_stale_and_repeated_leases_settles_the_valid_ones_with_their_results(
    client: jobsup.Client,
) -> None:
    ids = client.enqueue_many([{"name": "a"} for _ in range(3)])
    first, second, third = claim(client, "w1", limit=3)
    stale = Held(Lease(second.id, "w1", second.attempt + 1), second.name, second.queue, False)
    outcomes = [
        Outcome(held(third), SUCCEEDED, result='"c"'),  # not in id order: the pairs must stay paired
        Outcome(stale, SUCCEEDED, result='"b"'),
        Outcome(held(first), SUCCEEDED, result='"a"'),
        Outcome(held(first), SUCCEEDED, result='"a"'),  # the same lease twice
    ]
    assert client.store.transitions.complete(outcomes) == {first.id, third.id}
    assert (_result(client, ids[0]), _result(client, ids[2])) == ("a", "c")
    untouched = client.get(ids[1])
    assert untouched is not None and untouched.status == "running" and untouched.result is None


def _result(client: jobsup.Client, job_id: int) -> object:
    found = client.get(job_id)
    assert found is not None and found.status == "succeeded"
    return found.result


@pytest.mark.postgres
def test_a_settle_on_postgresql_is_one_statement_whose_text_does_not_change_with_the_batch(postgres_url: str) -> None:
    client = jobsup.Client(postgres_url)
    seen: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        seen.append(statement)

    db = client.store.db
    for size in (1, 3, 40):
        client.enqueue_many([{"name": "a"} for _ in range(size)])
        claimed = claim(client, "w1", limit=size)
        outcomes = [Outcome(held(c), SUCCEEDED, result=str(n)) for n, c in enumerate(claimed)]  # all different
        for engine in (db.engine, db.single):
            event.listen(engine, "before_cursor_execute", record)
        try:
            assert len(client.store.transitions.complete(outcomes)) == size
        finally:
            for engine in (db.engine, db.single):
                event.remove(engine, "before_cursor_execute", record)
    assert len(seen) == 3 and len(set(seen)) == 1, seen
    client.close()


@pytest.mark.postgres
def test_what_a_supervisor_compiles_before_it_forks_is_what_its_workers_use(postgres_url: str) -> None:
    from jobsup.store.database import Database
    from jobsup.store.store import Store

    supervisor, worker = Database(postgres_url, role="supervisor"), Database(postgres_url, role="worker")
    try:
        # A worker opens a Database of its own after the fork: the same dialect and statements.
        assert worker.dialect is supervisor.dialect
        assert Store(worker, holds_leases=True).transitions.sql is Store(supervisor, holds_leases=True).transitions.sql
    finally:
        supervisor.dispose()
        worker.dispose()


def test_compiling_ahead_leaves_the_claim_and_the_settles_compiled() -> None:
    from jobsup.store.dialects.postgresql import PostgreSQLDialect
    from jobsup.store.statements import Statements

    fresh = Statements(PostgreSQLDialect())  # nothing compiled yet (compiling needs no server)
    fresh.compile_ahead()
    assert "claim_text" in vars(fresh.dialect)
    for chain in (fresh.complete, fresh.release, fresh.fail):
        assert {"driver_text", "named_row"} <= vars(chain).keys()
    assert "numbered" in vars(fresh.complete)  # the text a settle sent behind its claim goes as


def test_a_settle_run_alone_returns_each_job_s_id_and_status_only() -> None:
    # What its callers read; the other columns are for the steps, which never run with it.
    from jobsup.store.dialects.postgresql import PostgreSQLDialect
    from jobsup.store.statements import Statements

    sql = Statements(PostgreSQLDialect())
    for chain in (sql.complete, sql.release, sql.fail):
        assert chain.named_row((1, "succeeded"))._fields == ("id", "status")  # type: ignore[attr-defined]
        assert len(chain.driver_text.returned) == 2  # what the driver reads back, too
        assert len(chain.statement.selected_columns) > 2  # the steps' run returns the rest


def test_failure_retries_with_backoff_then_dead_letters(client: jobsup.Client) -> None:
    job_id = client.enqueue("a", max_attempts=2)
    first = claim_one(client, now=T0)
    assert fail(client, first, error="E: 1", retry_in=30, now=T0) == "pending"
    assert claim(client, "w1", limit=1, now=T0 + timedelta(seconds=29)) == []
    second = claim_one(client, now=T0 + timedelta(seconds=31))
    assert second.attempt == 2
    status = fail(client, second, kind=TIMED_OUT, error="E: 2", retry_in=30, now=T0 + timedelta(seconds=40))
    assert status == "dead_lettered"
    stored = client.get(job_id)
    assert stored is not None
    assert (stored.status, stored.attempts, stored.last_error) == ("dead_lettered", 2, "E: 2")
    assert [(a.attempt, a.outcome, a.error) for a in stored.history] == [
        (1, "failed", "E: 1"),
        (2, "timed_out", "E: 2"),
    ]
    assert [j.id for j in client.dead_letters.list()] == [job_id]


def test_discard_dead_letters_at_once(client: jobsup.Client) -> None:
    job_id = client.enqueue("a", max_attempts=5)
    claimed = claim_one(client)
    assert fail(client, claimed, kind="discarded") == "dead_lettered"
    assert client.get(job_id).attempts == 1  # type: ignore[union-attr]


def test_release_gives_the_attempt_back(client: jobsup.Client) -> None:
    job_id = client.enqueue("a", max_attempts=1)
    first = claim_one(client)
    assert release(client, [first])
    stored = client.get(job_id)
    assert stored is not None and (stored.status, stored.attempts) == ("pending", 0)
    again = claim_one(client, owner="w2")
    assert again.attempt == 1
    succeed(client, [again])
    history = client.get(job_id).history  # type: ignore[union-attr]
    assert [(a.attempt, a.outcome, a.owner) for a in history] == [
        (1, "released", "w1"),
        (1, "succeeded", "w2"),
    ]


@pytest.mark.parametrize("stale", ["owner", "attempt"])
def test_stale_writes_change_nothing_and_say_so(client: jobsup.Client, stale: str) -> None:
    job_id = client.enqueue("a")
    claimed = claim_one(client)
    lease = Lease(job_id, "intruder", claimed.attempt) if stale == "owner" else Lease(job_id, "w1", 2)
    wrong = Held(lease, claimed.name, claimed.queue, claimed.needs_steps)
    before = client.get(job_id)
    assert client.store.transitions.renew([lease], lease=600.0) == set()
    assert succeed(client, [wrong]) == set()
    assert fail(client, wrong) is None
    assert release(client, [wrong]) == set()
    assert client.get(job_id) == before
    # The real holder is unaffected.
    assert client.store.transitions.renew([claimed.lease], lease=600.0) == {job_id}
    assert succeed(client, [claimed]) == {job_id}


def test_a_settled_lease_cannot_settle_again(client: jobsup.Client) -> None:
    client.enqueue("a")
    claimed = claim_one(client)
    assert succeed(client, [claimed])
    assert succeed(client, [claimed]) == set()
    assert fail(client, claimed) is None


def test_expired_leases_return_jobs_and_dead_letter_the_last_attempt(client: jobsup.Client) -> None:
    retried = client.enqueue("a", max_attempts=3)
    last = client.enqueue("a", max_attempts=1)
    first = claim_one(client, "w1", now=T0)
    second = claim_one(client, "w2", now=T0)
    expire = client.store.transitions.sweep.expire
    assert expire(now=T0 + timedelta(seconds=59)) == 0
    assert expire(now=T0 + timedelta(seconds=61)) == 2
    assert client.get(retried).status == "pending"  # type: ignore[union-attr]
    assert client.get(last).status == "dead_lettered"  # type: ignore[union-attr]
    assert client.get(retried).history[0].outcome == "lease_expired"  # type: ignore[union-attr]
    # The old holders' writes are fenced out.
    assert succeed(client, [first]) == set() and succeed(client, [second]) == set()


def test_a_renewal_begun_before_a_new_claim_of_the_same_lease_does_not_shorten_it(client: jobsup.Client) -> None:
    """A release gives the attempt back, so the worker's new claim of the job holds the same
    lease; a renewal whose clock was fixed before that claim extends nothing backwards (the
    worker counts the new lease from its claim)."""
    job_id = client.enqueue("a")
    first = claim_one(client, "w1", now=T0)
    assert release(client, [first], now=T0 + timedelta(seconds=1)) == {job_id}
    again = claim_one(client, "w1", now=T0 + timedelta(seconds=30))  # expires at T0+90
    assert again.lease == first.lease
    renew = client.store.transitions.renew
    assert renew([first.lease], lease=60.0, now=T0 + timedelta(seconds=2)) == {job_id}  # still "renewed"
    expire = client.store.transitions.sweep.expire
    assert expire(now=T0 + timedelta(seconds=89)) == 0  # not lapsed at T0+62, as the renewal would have it
    assert expire(now=T0 + timedelta(seconds=91)) == 1


def test_a_lapsed_batch_charges_only_the_job_that_was_running(client: jobsup.Client) -> None:
    """A lost host's worker held a batch: the first job of its latest claim was running; the
    others were waiting (or done and not yet written) and never used an attempt."""
    running, waiting = client.enqueue("a", max_attempts=3), client.enqueue("a", max_attempts=1)
    claim(client, "lost-host-worker", limit=2, now=T0)
    assert client.store.transitions.sweep.expire(now=T0 + timedelta(seconds=61)) == 2
    charged, spared = client.get(running), client.get(waiting)
    assert charged is not None and spared is not None
    assert (charged.status, [(a.attempt, a.outcome) for a in charged.history]) == ("pending", [(1, "lease_expired")])
    assert (spared.status, spared.attempts, [(a.attempt, a.outcome) for a in spared.history]) == (
        "pending",
        0,
        [(1, "released")],
    )


def test_a_lapsed_claim_of_an_older_worker_is_dated_by_its_open_attempt_row(client: jobsup.Client) -> None:
    """In a rolling deploy across schema revision 0018 a worker of the older code claims
    without touching the job row's start (it keeps its attempt before's) and opens an attempt
    row instead. Its latest claim is the one its row dates, not the job row's stale start."""
    from sqlalchemy import insert, update

    earlier, later = client.enqueue("a", max_attempts=1), client.enqueue("a", max_attempts=1)
    claim(client, "mixed-host", limit=1, now=T0)  # `earlier`, by this code: started at T0
    claim(client, "mixed-host", limit=1, now=T0 + timedelta(seconds=10))  # `later`, as an older worker:
    with client.database.transaction() as conn:
        conn.execute(update(job).where(job.c.id == later).values(started_at=T0 - timedelta(hours=1)))
        row = {"job_id": later, "attempt": 1, "owner": "mixed-host", "started_at": T0 + timedelta(seconds=10)}
        conn.execute(insert(job_attempt).values(**row))
    assert client.store.transitions.sweep.expire(now=T0 + timedelta(seconds=100)) == 2
    charged, spared = client.get(later), client.get(earlier)
    assert charged is not None and spared is not None
    assert (charged.status, charged.attempts) == ("dead_lettered", 1)  # its one attempt used
    assert (spared.status, spared.attempts) == ("pending", 0)  # waiting behind it: released


def test_expire_owner_closes_a_dead_workers_leases_by_what_it_was_running(client: jobsup.Client) -> None:
    running, waiting = client.enqueue("a", max_attempts=1), client.enqueue("a", max_attempts=1)
    other = client.enqueue("b")
    claimed = claim(client, "dead-worker", limit=2)
    claim_one(client, "live-worker")
    expire_owner = client.store.transitions.sweep.expire_owner
    assert expire_owner("dead-worker", {claimed[0].id: (claimed[0].attempt, LEASE_EXPIRED, "killed")}) == 2
    assert client.get(running).status == "dead_lettered"  # type: ignore[union-attr]  # its one attempt: used
    assert client.get(waiting).status == "pending"  # type: ignore[union-attr]  # never started: released
    assert client.get(waiting).attempts == 0  # type: ignore[union-attr]
    assert client.get(other).status == "running"  # type: ignore[union-attr]


def test_a_lost_host_s_worker_that_ran_jobs_at_once_is_charged_for_each(client: jobsup.Client) -> None:
    """Concurrency review, defect 5: a worker running three jobs at once (`q=1:3`) lost with
    its host: every job it was running used its attempt (before, one was charged and the
    others released as never started, so a job that takes its host down ran without end).
    A worker of one job at a time keeps its rule: the rest of its batch never started."""
    pooled, single = "host:default#1:aaaaaaaaaaaa/3", "host:default#2:bbbbbbbbbbbb"
    ids = client.enqueue_many([{"name": "a"} for _ in range(5)])
    running = claim(client, pooled, limit=3, now=T0)
    batch = claim(client, single, limit=2, now=T0)
    assert len(running) == 3 and len(batch) == 2
    assert client.store.transitions.sweep.expire(now=T0 + timedelta(minutes=5)) == 5
    histories = {i: [(a.attempt, a.outcome) for a in client.get(i).history] for i in ids}  # type: ignore[union-attr]
    for claimed in running:
        assert histories[claimed.id] == [(1, "lease_expired")]
    assert [histories[claimed.id] for claimed in batch] == [[(1, "lease_expired")], [(1, "released")]]


def test_a_lost_host_s_pool_that_claimed_ahead_is_charged_for_its_oldest_claims_too(client: jobsup.Client) -> None:
    """A pool claims ahead of its free places (`jobsup.worker.ahead`): a worker running three
    at once may hold four leases, the latest a job claimed ahead. Lost with its host, each is
    charged: the three claimed first were running (one may be what took the host down), and
    the one claimed ahead may have started. Charging only the three latest claims released
    one that was running."""
    pooled = "host:default#1:aaaaaaaaaaaa/3"
    client.enqueue_many([{"name": "a"} for _ in range(4)])
    running = claim(client, pooled, limit=3, now=T0)
    ahead = claim(client, pooled, limit=1, now=T0 + timedelta(seconds=0.5))
    assert client.store.transitions.sweep.expire(now=T0 + timedelta(minutes=5)) == 4
    for claimed in [*running, *ahead]:
        assert [(a.attempt, a.outcome) for a in client.get(claimed.id).history] == [(1, "lease_expired")]  # type: ignore[union-attr]


def test_cancel_ends_a_pending_job_and_asks_a_running_one(client: jobsup.Client) -> None:
    """A running job keeps its lease (and all it holds) until its attempt's end is written:
    its worker learns of the cancel at its next renewal."""
    pending = client.enqueue("a", run_at=T0 + timedelta(days=3650))
    running = client.enqueue("a")
    claimed = claim_one(client)
    assert client.cancel(pending) and client.cancel(running)
    assert client.get(pending).status == "cancelled"  # type: ignore[union-attr]
    asked = client.get(running)
    assert asked is not None and asked.status == "running" and asked.lease_owner == claimed.owner
    assert asked.cancel_requested_at is not None and asked.history[0].outcome is None
    renewed = client.store.transitions.renew([claimed.lease], lease=60.0)
    assert renewed == {running} and renewed.cancel_requested == {running}
    assert client.cancel(running)  # asking again changes nothing
    assert fail(client, claimed, kind=CANCELLED, error="stopped") == "cancelled"
    ended = client.get(running)
    assert ended is not None and ended.history[0].outcome == "cancelled" and ended.lease_owner is None
    assert not client.cancel(running)


@pytest.mark.parametrize("end", ["failed", "timed_out", "lease_expired", "released"])
def test_any_end_of_a_job_asked_to_cancel_ends_it_cancelled(client: jobsup.Client, end: str) -> None:
    """Whoever writes the end (the worker, its supervisor, the sweep) and however the
    attempt ended, the job does not run again."""
    job_id = client.enqueue("a")
    claimed = claim_one(client)
    client.cancel(job_id)
    if end == "released":
        assert release(client, [claimed]) == {job_id}
    else:
        assert fail(client, claimed, kind=end) == "cancelled"
    ended = client.get(job_id)
    assert ended is not None and ended.status == "cancelled" and ended.finished_at is not None
    assert [a.outcome for a in ended.history] == [end]
    assert claim(client) == []


def test_a_job_asked_to_cancel_that_succeeded_first_stays_a_success(client: jobsup.Client) -> None:
    job_id = client.enqueue("a")
    claimed = claim_one(client)
    client.cancel(job_id)
    assert succeed(client, [claimed]) == {job_id}
    assert client.get(job_id).status == "succeeded"  # type: ignore[union-attr]


def test_list_jobs_filters_by_status_and_queue(client: jobsup.Client) -> None:
    a = client.enqueue("a")
    b = client.enqueue("a", queue="mail")
    assert [j.id for j in client.list_jobs()] == [b, a]
    assert [j.id for j in client.list_jobs(queue="mail")] == [b]
    assert [j.id for j in client.list_jobs(status="pending", limit=1)] == [b]
    with pytest.raises(jobsup.BadInput, match="status 'done' is not one of"):
        client.list_jobs(status="done")


def test_unique_key_returns_the_live_job(client: jobsup.Client) -> None:
    first = client.enqueue("a", 1, unique_key="report-42")
    assert client.enqueue("a", 2, unique_key="report-42") == first
    claimed = claim_one(client)
    assert client.enqueue("a", 3, unique_key="report-42") == first  # running is still live
    succeed(client, [claimed])
    second = client.enqueue("a", 4, unique_key="report-42")
    assert second != first
    assert count_jobs(client) == 2


def test_enqueue_many_in_order_with_unique_keys(client: jobsup.Client) -> None:
    existing = client.enqueue("a", unique_key="k1")
    ids = client.enqueue_many(
        [{"name": "a", "payload": n} for n in range(3)]
        + [{"name": "a", "unique_key": "k1"}, {"name": "b", "queue": "mail"}]
    )
    assert len(ids) == 5 and ids[3] == existing
    assert [client.get(i).payload for i in ids[:3]] == [0, 1, 2]  # type: ignore[union-attr]
    assert client.get(ids[4]).queue == "mail"  # type: ignore[union-attr]


def test_enqueue_many_writes_nothing_when_one_job_is_bad(client: jobsup.Client) -> None:
    with pytest.raises(jobsup.InvalidPayload, match=r"payload\['when'\] is a datetime"):
        client.enqueue_many([{"name": "a"}, {"name": "a", "payload": {"when": datetime.now(UTC)}}])
    with pytest.raises(jobsup.BadInput, match=r"jobs\[0\]: unknown enqueue options \['quue'\]"):
        client.enqueue_many([{"name": "a", "quue": "mail"}])
    assert count_jobs(client) == 0


def test_transactional_enqueue_commits_and_rolls_back_with_the_caller(client: jobsup.Client, url: str) -> None:
    engine = create_engine(url)  # the application's own engine
    with engine.begin() as conn:
        kept = client.enqueue("a", connection=conn)
        kept_unique = client.enqueue("a", unique_key="tx", connection=conn)
    with pytest.raises(RuntimeError), engine.begin() as conn:
        client.enqueue("a", connection=conn)
        client.enqueue("a", unique_key="tx-2", connection=conn)
        raise RuntimeError("the caller's transaction fails")
    engine.dispose()
    assert {j.id for j in client.list_jobs()} == {kept, kept_unique}


def test_dead_letters_retry_retry_all_and_purge(client: jobsup.Client) -> None:
    ids = [client.enqueue("a", n, max_attempts=1) for n in range(3)]
    for claimed in claim(client, "w1", limit=3):
        fail(client, claimed, error="boom")
    assert sorted(j.id for j in client.dead_letters.list()) == ids
    assert client.dead_letters.retry(ids[0]) is True
    assert client.dead_letters.retry(ids[0]) is False  # no longer dead
    retried = client.get(ids[0])
    assert retried is not None and (retried.status, retried.attempts, retried.max_attempts) == ("pending", 1, 2)
    assert client.dead_letters.retry_all() == 2
    for claimed in claim(client, "w1", limit=3):
        fail(client, claimed, error="boom")
    assert client.dead_letters.purge(older_than="1h") == 0
    assert client.dead_letters.purge() == 3
    assert count_jobs(client) == 0
    with client.database.read() as conn:
        assert conn.execute(select(func.count()).select_from(job_attempt)).scalar_one() == 0


def test_retry_of_a_dead_letter_whose_unique_key_is_live_again_is_refused(client: jobsup.Client) -> None:
    dead = client.enqueue("a", unique_key="k", max_attempts=1)
    claimed = claim_one(client)
    fail(client, claimed, error="boom")
    live = client.enqueue("a", unique_key="k")
    with pytest.raises(jobsup.DuplicateJob, match=f"job {dead} cannot be retried"):
        client.dead_letters.retry(dead)
    assert client.get(dead).status == "dead_lettered"  # type: ignore[union-attr]
    assert client.get(live).status == "pending"  # type: ignore[union-attr]


def test_a_lease_owner_is_set_exactly_while_running(client: jobsup.Client) -> None:
    """The lease fence relies on it (see `Statements.fence`): walk every transition and check."""
    from sqlalchemy import or_

    def broken() -> list[tuple[int, str, str | None]]:
        with client.database.read() as conn:
            mismatch = or_(
                (job.c.status == "running") & job.c.lease_owner.is_(None),
                (job.c.status != "running") & job.c.lease_owner.isnot(None),
            )
            return [tuple(r) for r in conn.execute(select(job.c.id, job.c.status, job.c.lease_owner).where(mismatch))]

    ids = client.enqueue_many([{"name": "a", "max_attempts": 1} for _ in range(6)])
    assert broken() == []
    claimed = claim(client, "w", limit=6, now=T0)
    assert broken() == []
    succeed(client, [claimed[0]])
    fail(client, claimed[1])  # dead-lettered
    release(client, [claimed[2]])
    client.cancel(claimed[3].id)  # asked while it runs: still running, its lease held
    assert broken() == []
    fail(client, claimed[3], kind=CANCELLED)  # its worker stopped it
    client.store.transitions.sweep.expire(now=T0 + timedelta(minutes=5))  # [4] was running, [5] waiting
    assert broken() == []
    assert client.dead_letters.retry_all() == 2
    assert broken() == []
    # Each transition really happened (a walk that changed nothing would check nothing).
    outcomes = [[a.outcome for a in client.get(i).history] for i in ids]  # type: ignore[union-attr]
    assert outcomes == [["succeeded"], ["failed"], ["released"], ["cancelled"], ["lease_expired"], ["released"]]
    assert [client.get(i).status for i in ids] == ["succeeded", "pending", "pending", "cancelled", "pending", "pending"]  # type: ignore[union-attr]


def test_a_claimed_job_built_from_a_row_equals_one_built_by_its_own_init(client: jobsup.Client) -> None:
    from dataclasses import fields

    from jobsup.store.claim import claimed_job

    client.enqueue("a", {"x": 1}, actor="ann", concurrency_key="k")
    (built,) = claim(client, "w1", limit=1)
    values = [getattr(built, f.name) for f in fields(ClaimedJob)]
    assert built == ClaimedJob(*values) and hash(built) == hash(ClaimedJob(*values))
    assert claimed_job([*values, "a dialect's own column"]) == built
    assert {"lease", "held", "needs_steps"} <= built.__dict__.keys()  # made with the job, not at first use
    by_init = ClaimedJob(*values)  # its cached properties made by the properties themselves
    assert (built.lease, built.held, built.needs_steps) == (by_init.lease, by_init.held, by_init.needs_steps)
    assert built.needs_steps and built.held.needs_steps  # its concurrency key: its settle has steps
    assert (built.actor, built.concurrency_key, built.held.lease.job_id) == ("ann", "k", built.id)


@pytest.mark.parametrize("field", [None, "workflow_id", "batch_id", "triggers", "concurrency_key"])
def test_a_claimed_jobs_steps_are_those_needs_steps_finds(field: str | None) -> None:
    # `claimed_job` tests a row's step fields its own (faster) way: it must agree.
    from dataclasses import fields

    from jobsup.store.claim import claimed_job
    from jobsup.store.rows import needs_steps

    values = {f.name: None for f in fields(ClaimedJob)}
    values.update(id=1, name="a", queue="q", payload="{}", attempt=1, max_attempts=3, owner="w")
    if field is not None:
        values[field] = 7 if field.endswith("_id") else "x"
    built = claimed_job(list(values.values()))
    assert built.needs_steps is built.held.needs_steps is needs_steps(ClaimedJob(**values)) is (field is not None)


def test_the_history_shows_the_attempt_under_way_once_though_its_row_lands_between_the_reads(
    client: jobsup.Client,
) -> None:
    """`job_get` reads the job row, then the attempt rows: an attempt that ends in between is
    in both (its row carries the start its job row had). So is the open row a worker of the
    code before schema revision 0018 made at its claim, its job row's start left as it was."""
    from sqlalchemy import insert, update

    job_id = client.enqueue("a")
    claim(client)
    get = client.get(job_id)
    assert get is not None and [(a.attempt, a.outcome, a.owner) for a in get.history] == [(1, None, "w1")]
    started = get.history[0].started_at
    with client.database.transaction() as conn:  # the row, as the attempt's end writes it
        row = {"job_id": job_id, "attempt": 1, "owner": "w1", "started_at": started}
        conn.execute(insert(job_attempt).values(**row, finished_at=started, outcome="succeeded"))
    seen = client.get(job_id)
    assert seen is not None and seen.status == "running"
    assert [(a.attempt, a.outcome) for a in seen.history] == [(1, "succeeded")]
    with client.database.transaction() as conn:  # an older worker's claim: an open row, a stale start
        conn.execute(job_attempt.delete())
        conn.execute(insert(job_attempt).values(**row))
        conn.execute(update(job).where(job.c.id == job_id).values(started_at=started - timedelta(hours=1)))
    older = client.get(job_id)
    assert older is not None and [(a.attempt, a.outcome, a.started_at) for a in older.history] == [(1, None, started)]
