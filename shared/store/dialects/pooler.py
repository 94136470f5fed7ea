"""PostgreSQL behind a transaction-mode connection pooler (PgBouncer), and `listen_url`.

A pooler in transaction mode lends each transaction whichever server connection of its pool
is free, so nothing kept on a server session lasts beyond the transaction. jobsup keeps
almost nothing there (every multi-statement change is one transaction; the migration lock
is `pg_advisory_xact_lock`; isolation and autocommit are the driver's, sent with each BEGIN;
no SET, temporary table or session advisory lock). Two things do live on the session:

- psycopg's server-side prepared statements (a query run 5 times on a connection is
  prepared there, jobsup's claim, settle and single enqueue at their first run: see
  `jobsup.store.dialects.drivertext`): the next transaction may run on a server that never saw it
  (``prepared statement "_pg3_0" does not exist``) or has another of that name (``already
  exists``). Behind a pooler they are off (``prepare_threshold=None``).
- LISTEN: the server session that listens is lent on to others, and notifications never
  reach the client. Idle workers then LISTEN on `listen_url` (a direct connection to the
  server: notifications are per database, so an enqueue through the pooler still reaches
  it), or poll.

Detection, once per new connection: a pooler answers the startup itself and hands the client
its own cancel key (BackendKeyData), because it alone knows which server a client is on at
the moment; so the backend pid psycopg was told differs from the server's
`pg_backend_pid()`. In transaction mode that cannot be otherwise, so a transaction-mode
pooler is never missed. Session mode is seen as a pooler too: that costs prepared statements
and the LISTEN on the pooled URL, which ``listen_url = <the pooler's URL>`` brings back.
"""

from __future__ import annotations

import weakref
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import URL

from jobsup.errors import ConfigurationError

OFF = "off"  # listen_url: no LISTEN at all, idle workers poll
POOLED = "jobsup_pooled"  # in a pooled connection's `info`: whether a pooler answered it


def check_listen_url(value: str) -> None:
    """The setting on its own: empty, ``off``, or a PostgreSQL URL (password never shown)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from jobsup.store.dialects import hide_password, normalise_url

    if value in ("", OFF):
        return
    shown, wanted = hide_password(value), "give the PostgreSQL server's own postgresql://USER@HOST:5432/DB, or off"
    try:
        backend = make_url(value).drivername.partition("+")[0]
    except (ArgumentError, ValueError) as exc:
        reason = f" ({hide_password(str(exc))})" if isinstance(exc, ValueError) else ""
        raise ConfigurationError(f"listen_url {shown!r} is not a URL{reason}; {wanted}") from None
    if backend not in ("postgresql", "postgres"):
        raise ConfigurationError(f"listen_url {shown!r} is not a PostgreSQL URL; {wanted}")
    try:
        normalise_url(value)
    except ConfigurationError as exc:  # another driver than psycopg
        raise ConfigurationError(f"listen_url: {exc}") from None


def check_listen_with(database: URL, listen_url: str) -> None:
    """A listen URL only means something for a PostgreSQL database; ``off`` (listen to
    nothing) is true of every other database already, so one shared setting may say it."""
    if listen_url not in ("", OFF) and database.get_backend_name() != "postgresql":
        raise ConfigurationError(
            f"listen_url is set, but the database {database.render_as_string(hide_password=True)} is not "
            "PostgreSQL (only PostgreSQL has LISTEN/NOTIFY): remove listen_url"
        )


def watch(engine: Engine) -> Engine:
    """Make every new connection of `engine` find out whether a pooler answered it, and
    then stop preparing statements on the server."""
    event.listen(engine, "connect", _on_connect)
    return engine


def _on_connect(dbapi_connection: Any, record: Any) -> None:
    driver = record.driver_connection  # psycopg's Connection, or AsyncConnection under asyncio
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SELECT pg_backend_pid()")
        server_pid = cursor.fetchone()[0]
    finally:
        cursor.close()
    if not dbapi_connection.autocommit:
        dbapi_connection.rollback()  # the SELECT opened a transaction; the pool wants none
    pooled = driver.info.backend_pid != server_pid
    record.info[POOLED] = pooled
    if pooled:
        driver.prepare_threshold = None


def pooled(db: Any) -> bool:
    """Whether `db`'s connections go through a pooler (one checkout; no round trip once the
    pool holds a connection)."""
    with db.read() as conn:  # checking out connects, if the pool had nothing
        return bool(conn.info.get(POOLED))


# Per database: where its idle workers LISTEN (None: nowhere, they poll). Decided once.
_routes: weakref.WeakKeyDictionary[Any, URL | None] = weakref.WeakKeyDictionary()


def listen_route(db: Any) -> URL | None:
    """Where idle workers of `db` LISTEN: `listen_url` when given; none when it is ``off``,
    or when it is empty and the database URL goes through a pooler; else the database URL."""
    if db not in _routes:
        from jobsup.store.dialects import normalise_url

        given = getattr(db, "listen_url", "")
        if given == OFF:
            _routes[db] = None
        elif given:
            _routes[db] = normalise_url(given)
        else:
            _routes[db] = None if pooled(db) else db.url
    return _routes[db]


def polling_warning(db: Any) -> str | None:
    """What to tell the operator at start when idle workers will poll for want of a
    `listen_url` (None otherwise)."""
    if getattr(db, "listen_url", "") or not pooled(db):
        return None
    return (
        f"the database URL {db.safe_url} goes through a connection pooler (PgBouncer?), where LISTEN "
        "never hears a notification: idle workers poll instead (nothing is lost, jobs may start up to "
        "poll_interval later). Set listen_url (JOBSUP_LISTEN_URL, --listen-url) to the PostgreSQL "
        "server's own address, postgresql://USER@HOST:5432/DB, to wake them at once, or listen_url=off "
        "to poll without this warning"
    )


def unheard_warning(db: Any, route: URL, reason: str) -> str:
    """`listen_url` is set, but a notification sent through the database URL did not reach it."""
    return (
        f"listen_url {route.render_as_string(hide_password=True)} {reason}: idle workers poll instead (nothing "
        f"is lost, only latency). Point listen_url at the PostgreSQL server behind {db.safe_url}, directly "
        "(not through a pooler in transaction mode) and on the same database, or set it to off"
    )
