"""The audit trail on every real database: a row per operator action with its actor,
target, count and outcome; listing and its filters; retention; and the command line."""

from __future__ import annotations

import getpass
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from offline import OfflineDatabase
from sqlalchemy import update

import jobsup
from jobsup.audit import default_actor
from jobsup.store.audit import JOB_IDS_KEPT, Audit
from jobsup.store.schema import audit
from jobsup.supervisor.maintenance import PurgeAudit

from helpers import claim, fail, run_jobsup

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def last(client: jobsup.Client, action: str | None = None) -> Any:
    """The newest row (of `action`) as a dict, without its id and time."""
    [entry] = client.audit.list(action=action, limit=1)
    fields = entry.to_dict()
    del fields["id"], fields["at"]
    return fields


def row(actor: str, action: str, **fields: Any) -> dict[str, Any]:
    shape = {"target": None, "job_count": None, "job_ids": [], "outcome": "ok", "detail": None}
    return {"actor": actor, "action": action, **shape, **fields}


def dead_letters(client: jobsup.Client, count: int, **options: Any) -> list[int]:
    ids = [client.enqueue("a", max_attempts=1, **options) for _ in range(count)]
    for claimed in claim(client, "w1", options.get("queue", "default"), limit=count):
        assert fail(client, claimed) == "dead_lettered"
    return ids


def test_the_default_actor_is_the_os_user() -> None:
    assert default_actor() == f"os:{getpass.getuser()}"


def test_cancel_records_its_actor_and_outcome(client: jobsup.Client) -> None:
    job_id = client.enqueue("a")
    assert client.cancel(job_id, actor="web:alice") is True
    assert last(client) == row("web:alice", "job.cancel", job_count=1, job_ids=[job_id])
    assert client.cancel(job_id) is False  # finished already: no default actor missing
    assert last(client) == row(default_actor(), "job.cancel", job_count=0, job_ids=[job_id], outcome="not_found")


def test_dead_letter_retry_records_ok_not_found_and_refused(client: jobsup.Client) -> None:
    [first] = dead_letters(client, 1)
    assert client.dead_letters.retry(first, actor="ops") is True
    assert last(client) == row("ops", "dead.retry", job_count=1, job_ids=[first])
    assert client.dead_letters.retry(first, actor="ops") is False  # pending now
    assert last(client)["outcome"] == "not_found"
    [keyed] = dead_letters(client, 1, unique_key="k", queue="keyed")
    client.enqueue("a", unique_key="k", queue="keyed")  # a live job holds the key now
    with pytest.raises(jobsup.DuplicateJob):
        client.dead_letters.retry(keyed, actor="ops")
    refused = last(client)
    assert (refused["outcome"], refused["job_ids"], refused["job_count"]) == ("refused", [keyed], 0)
    assert "unique key" in refused["detail"]["reason"]


def test_retry_all_and_purge_record_the_count_and_the_first_ids(client: jobsup.Client) -> None:
    ids = dead_letters(client, 3)
    assert client.dead_letters.retry_all(actor="ops") == 3
    assert last(client) == row("ops", "dead.retry_all", job_count=3, job_ids=ids)
    for claimed in claim(client, "w1", limit=3):
        fail(client, claimed)
    assert client.dead_letters.purge(actor="ops") == 3
    assert last(client) == row("ops", "dead.purge", job_count=3, job_ids=ids)
    assert client.dead_letters.purge(older_than="30d", actor="ops") == 0
    assert last(client) == row("ops", "dead.purge", job_count=0, detail={"older_than_seconds": 30 * 86400.0})


def test_a_row_keeps_the_first_ids_and_the_true_count(client: jobsup.Client) -> None:
    client.store.audit.record("ops", "dead.purge", job_ids=list(range(1, 251)))
    entry = client.audit.list(limit=1)[0]
    assert (entry.job_count, entry.job_ids) == (250, tuple(range(1, JOB_IDS_KEPT + 1)))


def test_pause_and_resume_are_recorded(client: jobsup.Client) -> None:
    client.enqueue("a", queue="mail")
    client.queues.pause("mail", reason="smtp down", actor="alice")
    assert last(client) == row(
        "alice", "queue.pause", target="mail", detail={"reason": "smtp down", "was_paused": False}
    )
    client.queues.resume("mail", actor="bob")
    assert last(client) == row("bob", "queue.resume", target="mail")
    client.queues.resume("mail", actor="bob")
    assert last(client) == row("bob", "queue.resume", target="mail", outcome="not_found")


def test_recurring_changes_are_recorded(client: jobsup.Client) -> None:
    client.add_recurring("nightly", job="a", cron="0 3 * * *", timezone="Europe/Berlin", actor="ops")
    detail = {"job": "a", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "queue": "default"}
    assert last(client) == row("ops", "recurring.add", target="nightly", detail=detail)
    client.schedules.set_enabled("nightly", False, actor="ops")
    assert last(client) == row("ops", "recurring.disable", target="nightly")
    client.schedules.set_enabled("nightly", True, actor="ops")
    assert last(client) == row("ops", "recurring.enable", target="nightly")
    assert client.schedules.remove("nightly", actor="ops") is True
    assert last(client) == row("ops", "recurring.remove", target="nightly")
    assert client.schedules.remove("nightly", actor="ops") is False
    assert last(client) == row("ops", "recurring.remove", target="nightly", outcome="not_found")


def test_workflow_and_batch_actions_are_recorded(client: jobsup.Client) -> None:
    wf = jobsup.Workflow("etl")
    first = wf.add("a")
    wf.add("a", deps=[first], step="second")
    workflow_id = client.workflows.enqueue(wf)
    assert client.workflows.cancel(workflow_id, actor="ops") == 2
    assert last(client) == row("ops", "workflow.cancel", target=f"workflow:{workflow_id}", job_count=2)
    retried = client.workflows.retry(workflow_id, actor="ops")
    assert last(client) == row("ops", "workflow.retry", target=f"workflow:{workflow_id}", job_count=2, job_ids=retried)
    with pytest.raises(jobsup.JobsupError):
        client.workflows.retry(workflow_id + 100, actor="ops")
    assert last(client)["outcome"] == "not_found"
    batch_id = client.batches.enqueue([{"name": "a"}] * 3)
    assert client.batches.cancel(batch_id, actor="ops") == 3
    assert last(client) == row("ops", "batch.cancel", target=f"batch:{batch_id}", job_count=3)


def test_what_the_workers_do_is_not_audited(client: jobsup.Client) -> None:
    dead_letters(client, 2)  # enqueue, claim, fail: the application's and the worker's own work
    assert client.audit.list() == []


def test_listing_filters_by_time_actor_and_action(client: jobsup.Client) -> None:
    audit = client.store.audit
    audit.record("alice", "queue.pause", target="mail", now=T0 - timedelta(days=2))
    audit.record("bob", "queue.resume", target="mail", now=T0 - timedelta(hours=2))
    audit.record("alice", "job.cancel", job_ids=[7], now=T0 - timedelta(minutes=1))
    assert [e.action for e in audit.list(now=T0)] == ["job.cancel", "queue.resume", "queue.pause"]
    assert [e.action for e in audit.list(since=86400, now=T0)] == ["job.cancel", "queue.resume"]
    assert [e.action for e in audit.list(since=T0 - timedelta(hours=3))] == ["job.cancel", "queue.resume"]
    assert [e.action for e in audit.list(actor="alice")] == ["job.cancel", "queue.pause"]
    assert [e.action for e in audit.list(action="queue.")] == ["queue.resume", "queue.pause"]
    assert [e.action for e in audit.list(action="queue")] == []  # exact unless it ends in a dot
    assert [e.action for e in audit.list(limit=1)] == ["job.cancel"]


def test_retention_deletes_old_rows_only_in_bounded_batches(client: jobsup.Client) -> None:
    audit = client.store.audit
    for days in (100, 99, 95, 92, 91):
        audit.record("ops", "job.cancel", target=f"{days}d", now=T0 - timedelta(days=days))
    audit.record("ops", "job.cancel", target="89d", now=T0 - timedelta(days=89))
    audit.record("ops", "job.cancel", target="new", now=T0)
    step = PurgeAudit(client.store, 90 * 86400.0, batch=2, max_batches=2)
    assert step.run_once(now=T0) == 4  # two batches of two, the oldest first
    assert [e.target for e in audit.list()] == ["new", "89d", "91d"]
    assert step.run_once(now=T0) == 1
    assert step.run_once(now=T0) == 0
    assert [e.target for e in audit.list()] == ["new", "89d"]


def test_the_audit_settings_default_to_90_days() -> None:
    assert jobsup.settings.Settings().retain_audit == 90 * 86400.0
    assert jobsup.settings.load({"retain_audit": "30d"}).retain_audit == 30 * 86400.0


def test_bad_listing_arguments_are_refused(client: jobsup.Client) -> None:
    for bad in ({"since": "yesterday"}, {"since": datetime(2030, 1, 1)}, {"limit": 0}):
        with pytest.raises(jobsup.BadInput):
            client.audit.list(**bad)  # type: ignore[arg-type]


def test_sql_server_audit_statements_compile() -> None:
    db = OfflineDatabase()
    audit = Audit(db)  # type: ignore[arg-type]
    audit.record("ops", "dead.purge", job_ids=[1, 2], detail={"older_than_seconds": 60.0})
    audit.list(since=3600, actor="ops", action="queue.", limit=5)
    audit.purge(86400.0)
    sql = [" ".join(statement.split()) for statement in db.sql]
    assert sql[0].startswith(
        "INSERT INTO jobsup_audit (at, actor, action, target, job_count, job_ids, outcome, detail)"
    )
    assert "SELECT TOP 5" in sql[1] and "ORDER BY jobsup_audit.at DESC, jobsup_audit.id DESC" in sql[1]
    assert "SELECT TOP 1000 jobsup_audit.id FROM jobsup_audit WHERE jobsup_audit.at < dateadd(" in sql[2]
    assert db.params[0]["p_ids"] == "[1, 2]"


# -- the command line -------------------------------------------------------------------------


def cli(url: str, *args: str) -> Any:
    return run_jobsup(*args, "--database-url", url)


def test_operator_commands_record_the_actor_and_jobsup_audit_lists_them(url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("a", queue="mail")
    client.enqueue("a", queue="mail")  # still pending: what makes "mail" a known queue
    assert cli(url, "jobs", "cancel", str(job_id), "--actor", "alice").returncode == 0
    assert cli(url, "queues", "pause", "mail", "--reason", "smtp down").returncode == 0
    listed = json.loads(cli(url, "audit", "--json").stdout)
    assert [(e["actor"], e["action"], e["target"], e["outcome"]) for e in listed] == [
        (default_actor(), "queue.pause", "mail", "ok"),
        ("alice", "job.cancel", None, "ok"),
    ]
    assert listed[1]["job_ids"] == [job_id] and listed[1]["job_count"] == 1
    assert listed[0]["detail"] == {"reason": "smtp down", "was_paused": False}
    table = cli(url, "audit", "--actor", "alice", "--since", "1d")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["AT", "ACTOR", "ACTION", "TARGET", "JOBS", "OUTCOME", "DETAIL"]
    assert len(lines) == 2 and "alice" in lines[1] and "job.cancel" in lines[1] and f"1 ({job_id})" in lines[1]
    empty = cli(url, "audit", "--action", "recurring.")
    assert empty.stdout.strip() == "no audited actions"
    client.close()


def test_a_bad_since_is_a_clear_error_without_a_traceback(sqlite_url: str) -> None:
    result = cli(sqlite_url, "audit", "--since", "yesterday")
    assert result.returncode == 2
    assert "since" in result.stderr and "'yesterday' is not a duration" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_queues_commands_pause_list_and_resume(sqlite_url: str) -> None:
    client = jobsup.Client(sqlite_url)
    client.enqueue("a", queue="mail")
    refused = cli(sqlite_url, "queues", "pause", "mial")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "known queues: mail" in refused.stderr and "--force" in refused.stderr
    assert client.audit.list() == [] and client.store.pauses.states() == {}  # nothing written
    paused = cli(sqlite_url, "queues", "pause", "mail", "--reason", "smtp down", "--actor", "alice")
    assert paused.stdout.strip() == "paused queue mail"
    listed = json.loads(cli(sqlite_url, "queues", "list", "--json").stdout)
    assert [(q["queue"], q["state"], q["pending"], q["reason"], q["changed_by"]) for q in listed] == [
        ("mail", "paused", 1, "smtp down", "alice")
    ]
    table = cli(sqlite_url, "queues", "list").stdout.splitlines()
    assert table[0].split() == ["QUEUE", "STATE", "PENDING", "RUNNING", "REASON", "BY", "SINCE"]
    assert table[1].split()[:4] == ["mail", "paused", "1", "0"]
    assert cli(sqlite_url, "queues", "pause", "later", "--force").stdout.strip() == "paused queue later"
    assert cli(sqlite_url, "queues", "resume", "mail").stdout.strip() == "resumed queue mail"
    assert cli(sqlite_url, "queues", "resume", "mail").stdout.strip() == "queue mail was not paused"
    client.close()


def test_an_add_recurring_that_changes_nothing_records_nothing(client: jobsup.Client) -> None:
    for _ in range(3):  # what every instance does at every start
        client.add_recurring("nightly", job="a", cron="0 3 * * *", actor="ops")
    client.add_recurring("nightly", job="a", cron="0 4 * * *", actor="ops")
    assert [(e.action, e.detail["cron"]) for e in client.audit.list()] == [  # type: ignore[index]
        ("recurring.add", "0 4 * * *"),
        ("recurring.add", "0 3 * * *"),
    ]


def test_an_operator_enqueue_of_a_live_unique_key_is_recorded_unchanged(url: str) -> None:
    client = jobsup.Client(url)
    first = cli(url, "enqueue", "a", "--unique-key", "k", "--actor", "kim", "--json", "--allow-unknown")
    again = cli(url, "enqueue", "a", "--unique-key", "k", "--actor", "kim", "--json", "--allow-unknown")
    assert first.returncode == again.returncode == 0 and first.stdout == again.stdout
    assert [(e.action, e.outcome) for e in client.audit.list()] == [("job.enqueue", "unchanged"), ("job.enqueue", "ok")]


def test_a_retry_all_stopped_by_an_error_records_what_it_did(client: jobsup.Client) -> None:
    ids = [client.enqueue("a", max_attempts=1) for _ in range(3)]
    for job in claim(client, limit=3):
        fail(client, job)
    # The outage must land between two retries' commits, which no real fault (a time
    # window, a killed connection) lands deterministically: the third retry raises what the
    # store raises for a lost database.
    calls = {"n": 0}
    real = client.store.transitions.retry

    def retry_then_break(job_ids: list[int]) -> list[int]:
        calls["n"] += 1
        if calls["n"] == 3:
            raise jobsup.DatabaseUnavailable("the database went away")
        return real(job_ids)

    client.store.transitions.retry = retry_then_break  # type: ignore[method-assign]
    with pytest.raises(jobsup.DatabaseUnavailable):
        client.dead_letters.retry_all(actor="ops")
    entry = client.audit.list()[0]
    assert (entry.action, entry.outcome, entry.job_count, entry.job_ids) == (
        "dead.retry_all",
        "failed",
        2,
        tuple(ids[:2]),
    )


@pytest.mark.parametrize("actor", ["a\nforged line", "nul\x00", ""])
def test_an_actor_with_control_characters_is_refused_and_nothing_is_done(client: jobsup.Client, actor: str) -> None:
    job_id = client.enqueue("a")
    with pytest.raises(jobsup.BadInput, match="actor must"):
        client.cancel(job_id, actor=actor)
    assert client.get(job_id).status == "pending"  # type: ignore[union-attr]
    assert client.audit.list() == []
    with pytest.raises(jobsup.BadInput):
        client.audit.list(actor=actor)


def test_a_since_beyond_any_clock_and_an_unreadable_row_are_no_traceback(url: str, client: jobsup.Client) -> None:
    done = cli(url, "audit", "--since", "99999999d")
    assert done.returncode == 2 and "longer than 100 years" in done.stderr and "Traceback" not in done.stderr
    client.cancel(client.enqueue("a"), actor="ops")
    with client.database.transaction() as conn:
        conn.execute(update(audit).values(detail="{not json", job_ids="[1,"))
    [entry] = client.audit.list()
    assert entry.detail == {"unreadable": "{not json"} and entry.job_ids == ()
    assert cli(url, "audit").returncode == 0


def test_jobsup_batches_enqueue_adds_the_batch_and_is_audited(url: str, tmp_path: Any) -> None:
    children = tmp_path / "children.jsonl"
    children.write_text('{"name": "a", "payload": {"n": 1}}\n\n{"name": "a", "payload": {"n": 2}}\n')
    done = cli(url, "batches", "enqueue", str(children), "--allow-unknown", "--actor", "kim", "--json")
    assert done.returncode == 0, done.stderr
    batch = json.loads(done.stdout)
    client = jobsup.Client(url)
    info = client.batches.get(batch["id"])
    assert batch["children"] == 2 and info is not None and info.total == 2
    entry = client.audit.list()[0]
    assert (entry.actor, entry.action, entry.target, entry.job_count) == (
        "kim",
        "batch.enqueue",
        f"batch:{batch['id']}",
        2,
    )
    children.write_text("{not json\n")
    bad = cli(url, "batches", "enqueue", str(children))
    assert bad.returncode == 2 and "children.jsonl:1: not JSON" in bad.stderr


def _cut_connections(url: str) -> None:
    """End every other session of the test's database, as a server restart does."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                )
            else:
                found = "SELECT id FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID()"
                for (session,) in conn.execute(text(found)).all():
                    try:
                        conn.execute(text(f"KILL CONNECTION {int(session)}"))
                    except OperationalError as error:
                        if error.orig.args[0] != 1094:  # "Unknown thread id": it ended since the list
                            raise
    finally:
        engine.dispose()


@pytest.mark.parametrize("server", ["postgres_url", "mariadb_url"])
def test_an_action_after_a_restart_keeps_its_audit_row(request: pytest.FixtureRequest, server: str) -> None:
    """After the database restarts, each of a client's pools holds dead connections until
    one call fails on it. The fault campaign saw a cancel succeed on a pool already renewed
    while its audit row, written on the other pool, was lost (`audit.failed`)."""
    client = jobsup.Client(str(request.getfixturevalue(server)))
    try:
        first, second = client.enqueue("a"), client.enqueue("a")
        assert client.cancel(first, actor="ops")  # both pools hold a connection now
        _cut_connections(client.database.url)
        with pytest.raises(jobsup.DatabaseUnavailable):
            client.cancel(second, actor="ops")  # renews the pool of the change, not the audit's
        assert client.cancel(second, actor="ops")
        assert last(client) == row("ops", "job.cancel", job_count=1, job_ids=[second])
    finally:
        client.close()
