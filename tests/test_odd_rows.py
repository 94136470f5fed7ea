"""Corrupt or odd rows are claimed like any other and never block or spin the claim."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

import jobsup

from helpers import claim, succeed

INSERT = (
    "INSERT INTO jobsup_job (id, name, queue, priority, payload, status, run_at, attempts, max_attempts, "
    "created_at, updated_at) VALUES (:id, :name, 'default', 0, :payload, 'pending', {run_at}, 0, 3, "
    "{run_at}, {run_at})"
)


def insert_raw(client: jobsup.Client, run_at_sql: str, **values: Any) -> None:
    with client.database.transaction() as conn:
        conn.execute(text(INSERT.format(run_at=run_at_sql)), values)


def claim_all(client: jobsup.Client) -> list[int]:
    """Claim until the claim comes back empty, failing if that takes more rounds than rows."""
    claimed: list[int] = []
    for _ in range(50):
        batch = claim(client, "w", limit=2)
        if not batch:
            return claimed
        claimed.extend(job.id for job in batch)
    raise AssertionError("the claim loop kept finding work: it spins")


def test_undecodable_payload_and_unknown_name_are_claimed_like_any_row(url: str) -> None:
    client = jobsup.Client(url)
    before = client.enqueue("ok", 1)
    # Ids past the last one given: on MariaDB the session's database is emptied between tests
    # with DELETE, so its ids go on counting from the earlier tests' rows.
    corrupt, junk = before + 100, before + 101
    insert_raw(client, "'2000-01-01 00:00:00'", id=corrupt, name="no-such-job", payload="{not json")
    insert_raw(client, "'2000-01-01 00:00:00'", id=junk, name="ok", payload="\x01\ufffd binary junk")
    after = client.enqueue("ok", 2)
    claimed = claim(client, "w", limit=10)
    by_id = {job.id: job for job in claimed}
    assert set(by_id) == {before, corrupt, junk, after}
    assert by_id[corrupt].payload == "{not json"  # raw: the worker fails the attempt, not the store
    # Reading them back shows the raw text rather than failing.
    assert client.get(corrupt).payload == "{not json"  # type: ignore[union-attr]


@pytest.mark.parametrize("odd_id", [-7, 0, 2**62])
def test_odd_ids_are_claimed_and_settled(url: str, odd_id: int) -> None:
    client = jobsup.Client(url)
    insert_raw(client, "'2000-01-01 00:00:00'", id=odd_id, name="ok", payload="null")
    normal = client.enqueue("ok")
    claimed = claim(client, "w", limit=10)
    assert {job.id for job in claimed} == {odd_id, normal}
    assert succeed(client, claimed) == {odd_id, normal}


def test_sqlite_timestamps_of_another_format_never_spin(sqlite_url: str) -> None:
    client = jobsup.Client(sqlite_url)
    insert_raw(client, "'garbage'", id=1, name="ok", payload="null")  # sorts after every date
    insert_raw(client, "0", id=2, name="ok", payload="null")  # an integer sorts before text
    insert_raw(client, "'2000-01-01T00:00:00+00:00'", id=3, name="ok", payload="null")
    normal = client.enqueue("ok")
    assert sorted(claim_all(client)) == [2, 3, normal]
    assert client.get(1).run_at is None  # type: ignore[union-attr]  # unreadable, not an exception


@pytest.mark.postgres
def test_postgres_infinite_timestamps_never_break_the_claim(postgres_url: str) -> None:
    client = jobsup.Client(postgres_url)
    insert_raw(client, "'-infinity'", id=1001, name="ok", payload="null")
    insert_raw(client, "'infinity'", id=1002, name="ok", payload="null")
    normal = client.enqueue("ok")
    assert sorted(claim_all(client)) == [normal, 1001]
