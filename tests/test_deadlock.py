"""A deadlock is `Deadlock` on PostgreSQL and MariaDB: two real transactions that lock two
rows in opposite orders, through jobsup's own connections. The operators' transactions
(`jobsup.store.operators`) run again when the database picks them as its victim: a cancel
met a worker's renewal so on MariaDB in a CI run, and the cancel failed."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import text

import jobsup
from jobsup.errors import Deadlock
from jobsup.store.database import Database


def two_rows(client: jobsup.Client) -> list[int]:
    return client.enqueue_many([{"name": "a"}, {"name": "a"}], allow_unknown=True)


def lock(conn: Any, job_id: int) -> None:
    conn.execute(text("UPDATE jobsup_job SET priority = priority WHERE id = :id"), {"id": job_id})


@pytest.mark.parametrize("server", ["postgres_url", "mariadb_url"])
def test_two_transactions_that_lock_two_rows_in_opposite_orders_end_in_one_deadlock(
    request: pytest.FixtureRequest, server: str
) -> None:
    url = str(request.getfixturevalue(server))
    client = jobsup.Client(url)
    db = Database(url)
    first, second = two_rows(client)
    both_hold, raised = threading.Barrier(2, timeout=10), []

    def one(mine: int, theirs: int) -> None:
        try:
            with db.transaction("write") as conn:
                lock(conn, mine)
                both_hold.wait()
                lock(conn, theirs)  # one of the two waits for the other, which waits for it
        except Deadlock as exc:
            raised.append(exc)

    threads = [threading.Thread(target=one, args=pair) for pair in ((first, second), (second, first))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not any(thread.is_alive() for thread in threads)
        assert len(raised) == 1 and "deadlock" in str(raised[0]).lower(), raised
    finally:
        client.close()
        db.dispose()


@pytest.mark.parametrize("server", ["postgres_url", "mariadb_url"])
def test_a_cancel_chosen_as_a_deadlocks_victim_runs_again_and_cancels(
    request: pytest.FixtureRequest, server: str
) -> None:
    """The cancel locks its job's row, then (`also`) another row that a second transaction
    holds while it waits for the cancel's, and the database ends the cancel: on PostgreSQL
    the other never looks for a deadlock in the test's time (its `deadlock_timeout`), on
    MariaDB it has written more (InnoDB ends the smaller). The cancel runs again, after the
    other has committed, and the job is cancelled."""
    url = str(request.getfixturevalue(server))
    client = jobsup.Client(url)
    other = Database(url)
    cancelled, held = two_rows(client)
    heavier = client.enqueue_many([{"name": "a"}] * 5, allow_unknown=True)
    transitions = client.store.transitions
    other_holds, cancel_holds, errors = threading.Event(), threading.Event(), []
    tries = []

    def then_the_held_row(conn: Any, params: dict[str, Any]) -> None:
        assert other_holds.wait(10)
        lock(conn, cancelled)
        tries.append(1)
        cancel_holds.set()
        lock(conn, held)

    def the_other() -> None:
        try:
            with other.transaction("write") as conn:
                if server == "postgres_url":
                    conn.execute(text("SET LOCAL deadlock_timeout = '60s'"))
                for job_id in heavier:  # changed, not only locked: InnoDB weighs the rows written
                    conn.execute(text("UPDATE jobsup_job SET priority = priority + 1 WHERE id = :id"), {"id": job_id})
                lock(conn, held)
                other_holds.set()
                assert cancel_holds.wait(10)
                lock(conn, cancelled)
        except Deadlock as exc:
            errors.append(exc)

    thread = threading.Thread(target=the_other)
    thread.start()
    try:
        rows = transitions.cancel_where(transitions.sql.cancel, {"p_job": cancelled}, None, then_the_held_row)
        thread.join(30)
        assert [row.id for row in rows] == [cancelled]
        assert client.get(cancelled).status == "cancelled"  # type: ignore[union-attr]
        assert errors == [] and len(tries) == 2, (errors, tries)  # ended once, then through
    finally:
        thread.join(30)
        client.close()
        other.dispose()
