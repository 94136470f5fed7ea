"""A worker opens the connections its first claim and that claim's write use at once while
it boots (`jobsup.worker.boot.open_ahead`), not in the middle of its first batch. On real
databases: PostgreSQL, where a connection takes milliseconds, and SQLite, where nothing is
opened ahead."""

from __future__ import annotations

import socket

from sqlalchemy import text

from jobsup.store.database import Database
from jobsup.worker.boot import CONNECTIONS_AT_ONCE, open_ahead

BACKENDS = text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")


def _backends(postgres_url: str) -> int:
    watcher = Database(postgres_url)
    try:
        with watcher.read() as conn:
            return int(conn.execute(BACKENDS).scalar_one())
    finally:
        watcher.dispose()


def test_a_worker_on_postgresql_opens_its_connections_before_its_first_claim(postgres_url: str) -> None:
    db = Database(postgres_url, role="worker")
    try:
        before = _backends(postgres_url)
        open_ahead(db)
        assert db.single.pool.checkedin() == CONNECTIONS_AT_ONCE  # open, idle in the pool
        assert _backends(postgres_url) == before + CONNECTIONS_AT_ONCE
        with db.statement("claim") as first, db.statement("settle") as second:  # both at once: none new
            first.execute(text("SELECT 1"))
            second.execute(text("SELECT 1"))
        assert _backends(postgres_url) == before + CONNECTIONS_AT_ONCE
    finally:
        db.dispose()


def test_a_worker_on_sqlite_opens_nothing_ahead(sqlite_url: str) -> None:
    db = Database(sqlite_url, role="worker")
    try:
        open_ahead(db)
        assert db.single.pool.checkedin() == 0
    finally:
        db.dispose()


def test_a_database_that_does_not_answer_leaves_the_worker_booting(postgres_url: str) -> None:
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/jobsup"
    db = Database(url, role="worker")
    try:
        open_ahead(db)  # the first claim reports the outage, with its back-off
        assert db.single.pool.checkedout() == 0
    finally:
        db.dispose()
