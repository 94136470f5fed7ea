"""Helpers shared by the tests: PostgreSQL databases, polling with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import create_engine, text

PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
T = TypeVar("T")


def pg_url(name: str) -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def pg_error() -> str | None:
    """Why PostgreSQL cannot be used, or None when it can."""
    try:
        engine = create_engine(PG_ADMIN_URL, connect_args={"connect_timeout": 5})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:
        return str(exc).splitlines()[0]
    return None


def _admin(sql: str) -> None:
    engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(sql))
    engine.dispose()


def create_pg_database(name: str) -> None:
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _admin(f'CREATE DATABASE "{name}"')


def drop_pg_database(name: str) -> None:
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_until(predicate: Callable[[], T], *, timeout: float, interval: float = 0.05, what: str = "") -> T:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or predicate}")
        time.sleep(interval)
