"""A worker on PostgreSQL opens the connections its first claim and that claim's write use at
once while it boots (`jobsup.worker.boot.open_ahead`), not in the middle of its first batch.
On real databases: PostgreSQL, where a connection takes milliseconds, and SQLite, where
nothing is opened ahead."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import event, make_url, text

from jobsup.store.database import Database
from jobsup.worker.boot import open_ahead


@contextmanager
def counting_connects(db: Database) -> Iterator[list[object]]:
    """The connections `db`'s single statements' pool opens meanwhile."""
    opened: list[object] = []

    def connected(dbapi_connection: object, record: object) -> None:
        opened.append(dbapi_connection)

    event.listen(db.single, "connect", connected)
    try:
        yield opened
    finally:
        event.remove(db.single, "connect", connected)


def test_a_worker_on_postgresql_opens_its_connections_before_its_first_claim(postgres_url: str) -> None:
    db = Database(postgres_url, role="worker")
    try:
        with counting_connects(db) as opened:
            open_ahead(db)
            assert len(opened) == db.dialect.connections_ahead == 2
            assert db.single.pool.checkedin() == 2  # open, idle in the pool
            with db.statement("claim") as first, db.statement("settle") as second:  # both at once
                first.execute(text("SELECT 1"))
                second.execute(text("SELECT 1"))
            assert len(opened) == 2  # none opened now
    finally:
        db.dispose()


def test_a_worker_on_sqlite_opens_nothing_ahead(sqlite_url: str) -> None:
    db = Database(sqlite_url, role="worker")
    try:
        with counting_connects(db) as opened:
            open_ahead(db)
        assert opened == [] and db.single.pool.checkedin() == 0
    finally:
        db.dispose()


def test_a_database_that_refuses_the_second_connection_leaves_the_first_in_the_pool(postgres_url: str) -> None:
    """Best effort: the worker boots, and what was opened goes back to the pool, not lost
    checked out (a role allowed one connection: the second is refused by the server)."""
    role = f"jobsup_one_{uuid.uuid4().hex[:8]}"
    admin = Database(postgres_url)
    with admin.statement() as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1"))
    db = Database(make_url(postgres_url).set(username=role, password=None), role="worker")
    try:
        open_ahead(db)  # the first claim reports the refusal, with its back-off
        assert (db.single.pool.checkedin(), db.single.pool.checkedout()) == (1, 0)
    finally:
        db.dispose()
        with admin.statement() as conn:
            conn.execute(text(f"DROP ROLE {role}"))
        admin.dispose()
