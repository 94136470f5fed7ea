"""Rate limits on every real database: at most `limit` starts of a key in any window of `per`
seconds; a claimed job the window has no room for goes back pending (attempt not counted,
no attempt row), due at the start time the window gives it; a backlog is put back once and
drains at the full rate; other types behind it are claimed in the same call; claims of a
queue without rate-limited types stay one statement; bad policies are refused."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, func, select

import jobsup
from jobsup.errors import BadInput, DatabaseUnavailable
from jobsup.jobtypes import JobType
from jobsup.policies import Limits, Rate
from jobsup.registry import lookup
from jobsup.store.faults import OPERATION
from jobsup.store.schema import job, job_attempt

from helpers import claim, release, run_jobsup, run_together, succeed

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@jobsup.job("rate-three", queue="rated", rate="3/10s")
def three(ctx: jobsup.JobContext, payload: Any) -> None: ...


@jobsup.job("rate-partner-a", queue="partner", rate={"limit": 2, "per": "1m", "key": "partner-api"})
def partner_a(ctx: jobsup.JobContext, payload: Any) -> None: ...


@jobsup.job("rate-partner-b", queue="partner", rate={"limit": 2, "per": "1m", "key": "partner-api"})
def partner_b(ctx: jobsup.JobContext, payload: Any) -> None: ...


@jobsup.job("rate-threads", queue="rate-threads", rate="5/1s")
def threaded(ctx: jobsup.JobContext, payload: Any) -> None: ...


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def row(client: jobsup.Client, job_id: int) -> Any:
    columns = (job.c.status, job.c.attempts, job.c.run_at, job.c.rate_turn, job.c.started_at)
    with client.database.engine.connect() as conn:
        return conn.execute(select(*columns).where(job.c.id == job_id)).one()


def attempt_starts(client: jobsup.Client, ids: Sequence[int]) -> list[tuple[int, datetime]]:
    """(job id, started at) of every attempt row of `ids`: the starts the database recorded."""
    statement = select(job_attempt.c.job_id, job_attempt.c.started_at).where(job_attempt.c.job_id.in_(ids))
    with client.database.engine.connect() as conn:
        return [(job_id, started) for job_id, started in conn.execute(statement).all()]


def most_in_a_window(starts: Sequence[datetime], per: float) -> int:
    """The most starts inside any window [s, s + per) that opens at a start."""
    ordered = sorted(starts)
    return max((sum(1 for t in ordered if s <= t < s + timedelta(seconds=per)) for s in ordered), default=0)


def test_the_window_starts_its_limit_and_puts_the_rest_back_untouched(client: jobsup.Client) -> None:
    ids = [client.enqueue("rate-three", run_at=T0) for _ in range(6)]
    started = claim(client, queue="rated", limit=10, now=at(1))
    assert [c.id for c in started] == ids[:3]
    put_back = [row(client, job_id) for job_id in ids[3:]]
    # Never seen running: no attempt's row, no start left on the job row.
    assert {(r.status, r.attempts, r.started_at) for r in put_back} == {("pending", 0, None)}
    assert attempt_starts(client, ids[3:]) == []
    # The first waits for the oldest start to leave the window; the backlog behind it is
    # spaced one every 10/3 s, in claim order.
    turns = [r.run_at for r in put_back]
    assert turns == [r.rate_turn for r in put_back]
    assert turns[0] == at(11)
    assert [round((b - a).total_seconds(), 3) for a, b in itertools.pairwise(turns)] == [3.333, 3.333]
    assert claim(client, queue="rated", limit=10, now=at(10)) == []


def test_a_backlog_drains_at_the_rate_and_no_window_holds_more(client: jobsup.Client) -> None:
    ids = [client.enqueue("rate-three", run_at=T0) for _ in range(12)]
    starts: dict[int, datetime] = {}
    for tick in range(0, 60):  # a worker claiming every second for a minute
        now = at(tick)
        claimed = claim(client, queue="rated", limit=10, now=now)
        for c in claimed:
            assert c.id not in starts
            starts[c.id] = now
        succeed(client, claimed, now=now)
    assert sorted(starts) == ids
    assert most_in_a_window(list(starts.values()), 10) == 3
    assert max(starts.values()) <= at(45)  # 12 jobs at 3 per 10 s: done in about 40 s


def test_types_naming_one_key_share_its_window(client: jobsup.Client) -> None:
    for name in ("rate-partner-a", "rate-partner-b", "rate-partner-a"):
        client.enqueue(name, run_at=T0)
    started = claim(client, queue="partner", limit=10, now=at(1))
    assert len(started) == 2
    assert claim(client, queue="partner", limit=10, now=at(30)) == []
    assert len(claim(client, queue="partner", limit=10, now=at(61))) == 1


def test_other_types_behind_a_limited_backlog_are_claimed_in_the_same_call(client: jobsup.Client) -> None:
    for _ in range(40):
        client.enqueue("rate-three", run_at=T0, priority=10)
    plain = [client.enqueue("rate-plain", queue="rated", run_at=T0, allow_unknown=True) for _ in range(4)]
    claimed = claim(client, queue="rated", limit=5, now=at(1))
    names = [c.name for c in claimed]
    assert names.count("rate-three") == 3 and names.count("rate-plain") == 2
    assert {c.id for c in claim(client, queue="rated", limit=5, now=at(1))} == set(plain[2:])


def test_a_put_back_job_starts_at_its_turn_as_its_first_attempt(client: jobsup.Client) -> None:
    first = [client.enqueue("rate-three", run_at=T0) for _ in range(4)]
    succeed(client, claim(client, queue="rated", limit=10, now=at(0)), now=at(0))
    assert row(client, first[3]).run_at == at(10)
    [late] = claim(client, queue="rated", limit=10, now=at(10))
    assert late.id == first[3] and late.attempt == 1


def test_competing_claimers_never_start_more_than_the_limit(client: jobsup.Client) -> None:
    ids = [client.enqueue("rate-threads") for _ in range(40)]
    errors: list[BaseException] = []
    done = threading.Event()

    def claimer(owner: str) -> None:
        try:
            other = jobsup.Client(client.database.url)
            while not done.is_set():
                claimed = claim(other, owner, queue="rate-threads", limit=3)
                succeed(other, claimed)
                with other.database.engine.connect() as conn:
                    finished = conn.execute(
                        select(func.count()).select_from(job).where(job.c.id.in_(ids), job.c.status == "succeeded")
                    ).scalar_one()
                if finished == len(ids):
                    done.set()
            other.close()
        except BaseException as exc:
            errors.append(exc)
            done.set()

    run_together([threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)], timeout=120)
    assert errors == []
    starts = attempt_starts(client, ids)
    assert sorted(job_id for job_id, _ in starts) == ids  # each started exactly once
    assert most_in_a_window([started for _, started in starts], 1.0) <= 5


def test_an_outage_in_a_later_round_keeps_the_jobs_claimed_before_it(client: jobsup.Client) -> None:
    for _ in range(10):
        client.enqueue("rate-three", run_at=T0, priority=10)
    for _ in range(4):
        client.enqueue("rate-plain", queue="rated", run_at=T0, allow_unknown=True)
    committed: list[str] = []

    def commits(conn: Any) -> None:
        if conn.get_execution_options().get(OPERATION) == "claim":
            committed.append("round")

    def begins(conn: Any) -> None:
        if committed and conn.get_execution_options().get(OPERATION) == "claim":
            raise DatabaseUnavailable("the database went away between two claim rounds")

    engines = {client.database.engine, client.database.single}
    for engine in engines:
        event.listen(engine, "commit", commits)
        event.listen(engine, "begin", begins)
    claimed = claim(client, queue="rated", limit=5, now=at(1))
    for engine in engines:
        event.remove(engine, "commit", commits)
        event.remove(engine, "begin", begins)
    # The first round's three starts committed: they are returned to run, not lost to a lease
    # nobody renews.
    assert committed == ["round"]
    assert [c.name for c in claimed] == ["rate-three"] * 3
    assert {row(client, c.id).status for c in claimed} == {"running"}


@pytest.mark.postgres
def test_claims_of_a_queue_without_rate_limits_stay_one_statement(postgres_url: str) -> None:
    client = jobsup.Client(postgres_url)
    client.enqueue("rate-plain", queue="unrated", run_at=T0, allow_unknown=True)
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    for engine in (client.database.engine, client.database.single):
        event.listen(engine, "before_cursor_execute", seen)
    assert len(claim(client, queue="unrated", now=at(1))) == 1
    assert len(statements) == 1, statements
    client.close()


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        (0, "takes 'N/PERIOD'"),
        ("0/s", "from 1 to 10,000"),
        ("10/x", "not a duration"),
        ("10/0s", "from 10ms to 1 day"),
        ("10/2d", "from 10ms to 1 day"),
        ("20000/s", "from 1 to 10,000"),
        ({"limit": 5}, "takes {'limit': N, 'per': DURATION}"),
        ({"limit": 5, "per": "1s", "key": ""}, "rate key"),
        ({"limit": 5, "per": "1s", "burst": 3}, "takes {'limit': N"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_job(policy: object, says: str) -> None:
    with pytest.raises(BadInput, match="rate-bad") as raised:
        jobsup.job("rate-bad", rate=policy)(lambda ctx, payload: None)
    assert says in str(raised.value)


def test_a_rate_limited_type_cannot_go_to_another_queue(client: jobsup.Client) -> None:
    with pytest.raises(BadInput, match="rate-limited in its queue 'rated'"):
        client.enqueue("rate-three", queue="elsewhere")
    assert client.list_jobs() == []


def test_the_policy_round_trips_through_a_definition() -> None:
    from jobsup.policies import Limits

    limits = Limits.parse("x", rate={"limit": 7, "per": "2m", "key": "k"})
    assert Limits.load(limits.describe()) == limits
    assert Limits.parse("x", rate="10/s").rate.per == 1.0


def test_definitions_show_prints_the_rate(client: jobsup.Client, url: str) -> None:
    from jobsup.registry import lookup

    found = lookup("rate-partner-a")
    assert found is not None
    client.store.definitions.publish([found.type], instance="test")
    shown = run_jobsup("--database-url", url, "definitions", "show", "rate-partner-a")
    assert shown.returncode == 0, shown.stderr
    assert 'limits: rate {"key": "partner-api", "limit": 2, "per": 60.0}' in shown.stdout


def test_a_put_back_keeps_the_history_of_a_released_attempt(client: jobsup.Client) -> None:
    first = client.enqueue("rate-three", run_at=T0)
    released = claim(client, queue="rated", now=at(0))
    assert release(client, released, now=at(0)) == {first}  # attempt 1 closed, not counted
    others = [client.enqueue("rate-three", run_at=at(-1)) for _ in range(2)]  # due before it
    assert {c.id for c in claim(client, queue="rated", limit=2, now=at(1))} == set(others)  # window full
    assert claim(client, queue="rated", now=at(2)) == []  # the released job, put back
    assert len(attempt_starts(client, [first])) == 1  # its released attempt's row is kept


def test_types_sharing_a_key_with_another_rate_are_refused() -> None:
    with pytest.raises(BadInput, match="rate key 'partner-api' is already 2 per 60s for job 'rate-partner-a'"):
        jobsup.job("rate-partner-c", queue="partner", rate={"limit": 5, "per": "1m", "key": "partner-api"})(
            lambda c, p: None
        )
    assert lookup("rate-partner-c") is None


def test_published_types_that_disagree_on_a_key_are_all_claimed_under_one_rate(client: jobsup.Client) -> None:
    # Two apps published these; neither process registered both, so nothing refused them.
    loose = JobType("pub-z-loose", queue="pub", limits=Limits(rate=Rate(5, 60.0, "shared-pub")))
    strict = JobType("pub-a-strict", queue="pub", limits=Limits(rate=Rate(1, 60.0, "shared-pub")))
    client.store.definitions.publish([loose], instance="app-one")
    client.store.definitions.publish([strict], instance="app-two")
    client.store.resolver.refresh()
    assert client.store.resolver.key_rate("shared-pub") == strict.limits.rate
    for _ in range(3):
        client.enqueue("pub-z-loose", run_at=T0)
    # Only the loose type's jobs in this claim: the window is still the first type's by name.
    assert len(claim(client, queue="pub", limit=10, now=at(1))) == 1
