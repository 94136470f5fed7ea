"""Paused queues on every real database: a pause holds inside the claim statement itself, a
resume lets claims through again and wakes idle workers, and bad input writes nothing."""

from __future__ import annotations

import json
import select
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from offline import OfflineDatabase
from sqlalchemy import event, func, text
from sqlalchemy import select as sql_select

import jobsup
from jobsup.jobtypes import Resolver
from jobsup.store.audit import Audit
from jobsup.store.claim import claim_params
from jobsup.store.pauses import Pauses
from jobsup.store.schema import audit, queue_state
from jobsup.store.transitions import Transitions

from helpers import claim, plan_nodes, succeed

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def rows_of(client: jobsup.Client, table: Any) -> int:
    with client.database.read() as conn:
        return int(conn.execute(sql_select(func.count()).select_from(table)).scalar_one())


def test_a_paused_queue_claims_nothing_while_others_still_claim(client: jobsup.Client) -> None:
    mail = [client.enqueue("a", queue="mail") for _ in range(3)]
    other = client.enqueue("a", queue="default")
    assert client.queues.pause("mail", reason="smtp is down", actor="alice") is True
    assert claim(client, "w1", "mail", limit=10) == []
    assert [c.id for c in claim(client, "w1", "default", limit=10)] == [other]
    # Enqueueing goes on while it is paused; the jobs wait.
    mail.append(client.enqueue("a", queue="mail"))
    assert claim(client, "w2", "mail", limit=10) == []
    assert client.queues.resume("mail", actor="bob") is True
    assert sorted(c.id for c in claim(client, "w1", "mail", limit=10)) == mail


def test_a_pause_outlives_the_client_that_made_it(url: str) -> None:
    first = jobsup.Client(url)
    job_id = first.enqueue("a", queue="mail")
    first.queues.pause("mail")
    first.close()
    again = jobsup.Client(url)  # a restart, or another instance
    try:
        assert claim(again, "w1", "mail") == []
        [row] = [q for q in again.queues.list() if q["queue"] == "mail"]
        assert (row["state"], row["pending"]) == ("paused", 1)
        again.queues.resume("mail")
        assert [c.id for c in claim(again, "w1", "mail")] == [job_id]
    finally:
        again.close()


def test_a_running_job_of_a_paused_queue_still_settles(client: jobsup.Client) -> None:
    client.enqueue("a", queue="mail")
    [running] = claim(client, "w1", "mail")
    client.queues.pause("mail")
    assert succeed(client, [running]) == {running.id}
    assert client.get(running.id).status == "succeeded"  # type: ignore[union-attr]


def test_queues_lists_every_known_queue_with_its_state(client: jobsup.Client) -> None:
    client.enqueue("a", queue="mail")
    client.enqueue("a", queue="mail")
    client.enqueue("a", queue="default")
    claim(client, "w1", "default")
    client.add_recurring("nightly", job="a", cron="0 3 * * *", queue="reports", allow_unknown=True)
    client.queues.pause("later", reason="deploy first", actor="alice", allow_unknown=True)
    client.queues.pause("mail", actor="carol")
    rows = {row["queue"]: row for row in client.queues.list()}
    assert sorted(rows) == ["default", "later", "mail", "reports"]
    assert {q: (r["state"], r["pending"], r["running"]) for q, r in rows.items()} == {
        "default": ("active", 0, 1),
        "later": ("paused", 0, 0),
        "mail": ("paused", 2, 0),
        "reports": ("active", 0, 0),
    }
    assert (rows["later"]["reason"], rows["later"]["changed_by"]) == ("deploy first", "alice")
    assert rows["mail"]["since"] is not None and rows["default"]["since"] is None
    client.queues.resume("mail", actor="dave")
    mail = next(r for r in client.queues.list() if r["queue"] == "mail")
    assert (mail["state"], mail["changed_by"], mail["reason"]) == ("active", "dave", None)


def test_pausing_again_keeps_the_pause_time_and_updates_the_reason(client: jobsup.Client) -> None:
    client.enqueue("a", queue="mail")
    client.queues.pause("mail", reason="first")
    since = client.store.pauses.states()["mail"].changed_at
    assert client.queues.pause("mail", reason="second", actor="bob") is False
    state = client.store.pauses.states()["mail"]
    assert (state.paused, state.reason, state.changed_by, state.changed_at) == (True, "second", "bob", since)


def test_resuming_a_queue_that_is_not_paused_changes_nothing(client: jobsup.Client) -> None:
    client.enqueue("a", queue="mail")
    assert client.queues.resume("mail") is False
    assert rows_of(client, queue_state) == 0


def test_pausing_an_unknown_queue_is_refused_naming_the_known_ones(client: jobsup.Client) -> None:
    client.enqueue("a", queue="mail")
    client.enqueue("a", queue="default")
    with pytest.raises(jobsup.UnknownQueue) as refused:
        client.queues.pause("mial")
    message = str(refused.value)
    assert "'mial'" in message and "known queues: default, mail" in message
    assert "--force" in message and "allow_unknown=True" in message and "ahead of the deploy" in message
    assert isinstance(refused.value, jobsup.BadInput)
    assert rows_of(client, queue_state) == 0 and rows_of(client, audit) == 0  # nothing written
    assert client.queues.pause("mial", allow_unknown=True) is True
    assert client.store.pauses.paused() == {"mial"}


@pytest.mark.parametrize(
    "arguments",
    [{"queue": ""}, {"queue": "bad queue"}, {"queue": "mail", "reason": "x" * 1001}, {"queue": "mail", "actor": ""}],
)
def test_bad_pause_arguments_are_refused_and_nothing_is_written(client: jobsup.Client, arguments: Any) -> None:
    client.enqueue("a", queue="mail")
    options = dict(arguments)
    queue = options.pop("queue")
    with pytest.raises(jobsup.BadInput):
        client.queues.pause(queue, **options)
    assert rows_of(client, queue_state) == 0 and rows_of(client, audit) == 0


def test_a_definition_or_a_schedule_makes_a_queue_known(client: jobsup.Client) -> None:
    assert not client.store.pauses.is_known("reports")
    client.add_recurring("nightly", job="a", cron="0 3 * * *", queue="reports", allow_unknown=True)
    assert client.store.pauses.is_known("reports")
    client.store.definitions.publish([jobsup.jobtypes.JobType("typed", queue="typed-q")], instance="test")
    assert client.queues.pause("typed-q") is True


def test_resume_wakes_the_idle_workers_of_its_queue(client: jobsup.Client) -> None:
    client.enqueue("a", queue="mail")
    client.queues.pause("mail")
    db = client.database
    waiting, other = db.dialect.listener(db, "mail"), db.dialect.listener(db, "default")
    if db.dialect.name == "mariadb":
        assert waiting is None and other is None  # no wakeups there: its idle workers poll
        return
    assert waiting is not None and other is not None
    try:
        for listener in (waiting, other):
            listener.drain()
        client.queues.resume("mail")
        ready, _, _ = select.select([waiting.fileno()], [], [], 5.0)
        assert ready, "resuming did not wake the queue's idle worker"
        ready, _, _ = select.select([other.fileno()], [], [], 0.2)
        assert not ready, "a worker of another queue was woken"
    finally:
        waiting.close()
        other.close()


def test_the_sqlite_recheck_sees_a_pause_made_after_the_read(sqlite_url: str) -> None:
    """SQLite claims in two steps: a lock-free read, then an update that rechecks every
    condition. A pause that commits between them must stop the update."""
    client = jobsup.Client(sqlite_url)
    job_id = client.enqueue("a", queue="mail")
    dialect, db = client.database.dialect, client.database
    params = claim_params(dialect, queue="mail", owner="w1", limit=1, lease=60.0, now=None)
    assert dialect.claim_candidates(db, params) == [job_id]  # type: ignore[attr-defined]
    client.queues.pause("mail")
    assert list(dialect.claim_update(db, [job_id], params, None)) == []  # type: ignore[attr-defined]
    assert client.get(job_id).status == "pending"  # type: ignore[union-attr]


@pytest.mark.postgres
def test_the_postgres_pause_check_is_one_primary_key_lookup_per_claim(postgres_url: str) -> None:
    """Run once per claim (an InitPlan), not once per candidate row (a SubPlan), and through
    the primary key once the table is more than a page (on one page a scan is cheaper)."""
    client = jobsup.Client(postgres_url)
    db = client.database
    with db.transaction() as conn:
        conn.execute(
            text(
                "INSERT INTO jobsup_queue_state (queue, paused, changed_by, changed_at) "
                "SELECT 'q' || n, n % 2 = 0, 'test', now() FROM generate_series(1, 5000) AS n"
            )
        )
    with db.read() as conn:
        conn.execute(text("ANALYZE jobsup_queue_state"))
    params = claim_params(db.dialect, queue="default", owner="w", limit=10, lease=60.0, now=T0 + timedelta(days=1))

    def explain(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> Any:
        return "EXPLAIN (FORMAT JSON) " + statement, parameters

    with db.statement() as conn:
        event.listen(conn, "before_cursor_execute", explain, retval=True)
        raw = conn.execute(db.dialect.claim_statement, params).scalar_one()  # type: ignore[attr-defined]
    plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
    pauses = [n for n in plan_nodes(plan) if n.get("Relation Name") == "jobsup_queue_state"]
    shown = json.dumps(plan, indent=1)
    assert len(pauses) == 1, shown
    assert pauses[0].get("Index Name") == "jobsup_queue_state_pkey", shown
    parents = [n for n in plan_nodes(plan) if pauses[0] in plan_nodes(n) and n.get("Parent Relationship") == "InitPlan"]
    assert parents, shown


def test_sql_server_claims_carry_the_pause_and_pausing_compiles() -> None:
    """SQL Server, offline (see tests/offline.py): the claim statement itself holds the
    pause, and a pause and a resume write their state and audit rows in one transaction."""
    db = OfflineDatabase()
    Transitions(db, Resolver(None)).claim("mail", "w", limit=3, lease=60.0)  # type: ignore[arg-type]
    pauses = Pauses(db, Audit(db))  # type: ignore[arg-type]
    pauses.pause("mail", actor="alice", reason="smtp down", allow_unknown=True)
    pauses.resume("mail", actor="bob")
    sql = [" ".join(statement.split()) for statement in db.sql]
    claim_sql = sql[0]
    assert "FROM jobsup_job WITH (UPDLOCK, READPAST, ROWLOCK)" in claim_sql
    assert (
        "NOT (EXISTS (SELECT 1 FROM jobsup_queue_state "
        "WHERE jobsup_queue_state.queue = :p_queue AND jobsup_queue_state.paused = 1))"
    ) in claim_sql
    assert any(
        s.startswith("INSERT INTO jobsup_queue_state (queue, paused, reason, changed_by, changed_at)") for s in sql
    )
    assert any(s.startswith("UPDATE jobsup_queue_state SET paused=:paused") and "paused = 1" in s for s in sql)
    assert sum(s.startswith("INSERT INTO jobsup_audit") for s in sql) == 2
    bound = {key: value for params in db.params for key, value in params.items()}
    assert bound["p_queue"] == "mail" and bound["p_actor"] == "bob"
