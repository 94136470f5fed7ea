"""The host clock, asked in one place.

The reference clock of a database is its dialect's `now()`: the database's own clock on
PostgreSQL and SQL Server (so skew between hosts cannot steal a lease), this host's on
SQLite (one host). Code that needs the host's time asks `host_clock()` (or `host_seconds()`),
never `datetime.now()`, and every store operation takes `now=` so tests fix the instant.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime


def host_clock() -> datetime:
    return datetime.now(UTC)


def host_seconds() -> float:
    """`host_clock()` as seconds since the epoch, no datetime made (a worker asks at every start)."""
    return time.time()
