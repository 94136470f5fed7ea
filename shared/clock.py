"""The host clock, asked in one place.

The reference clock of a database is its dialect's `now()`: the database's own clock on
PostgreSQL and SQL Server (so skew between hosts cannot steal a lease), this host's on
SQLite (one host). Code that needs the host's time asks `host_clock()`, never
`datetime.now()`, and every store operation takes `now=` so tests fix the instant.
"""

from __future__ import annotations

from datetime import UTC, datetime


def host_clock() -> datetime:
    return datetime.now(UTC)
