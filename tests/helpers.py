"""Helpers shared by the tests: PostgreSQL databases, polling with a deadline, and the
transitions as a worker drives them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, make_url, text

from jobsup.store.rows import FAILED, SUCCEEDED, Held, Outcome

PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
T = TypeVar("T")


def pg_url(name: str) -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def server_error(admin_url: str) -> str | None:
    """Why the server behind `admin_url` cannot be used, or None when it can."""
    try:
        engine = create_engine(admin_url, connect_args={"connect_timeout": 5})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:
        return str(exc).splitlines()[0]
    return None


def _admin(admin_url: str, sql: str) -> None:
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(sql))
    engine.dispose()


def pg_error() -> str | None:
    return server_error(PG_ADMIN_URL)


def create_pg_database(name: str) -> None:
    _admin(PG_ADMIN_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _admin(PG_ADMIN_URL, f'CREATE DATABASE "{name}"')


def drop_pg_database(name: str) -> None:
    _admin(PG_ADMIN_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


MARIADB_ADMIN_URL = "mariadb+pymysql://root@127.0.0.1:3306/mysql"


def mariadb_database_url(name: str) -> str:
    return f"mariadb+pymysql://root@127.0.0.1:3306/{name}"


def mariadb_error() -> str | None:
    return server_error(MARIADB_ADMIN_URL)


def create_mariadb_database(name: str) -> None:
    _admin(MARIADB_ADMIN_URL, f"DROP DATABASE IF EXISTS `{name}`")
    _admin(MARIADB_ADMIN_URL, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")


def drop_mariadb_database(name: str) -> None:
    _admin(MARIADB_ADMIN_URL, f"DROP DATABASE IF EXISTS `{name}`")


def wait_until(
    predicate: Callable[[], T], *, timeout: float, interval: float = 0.05, what: str | Callable[[], str] = ""
) -> T:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds.
    `what` names what was awaited; a callable is asked at the timeout, to say what was seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:g}s waiting for {described or predicate}")
        time.sleep(interval)


# -- the transitions as the store tests drive them ---------------------------------------------
# Each takes claimed jobs (or `Held` leases built by hand, for stale writes) and hands the
# transitions the outcome a worker would.


def claim(
    client: Any, owner: str = "w1", queue: str = "default", *, limit: int = 1, lease: float = 60.0, now: Any = None
) -> list[Any]:
    return list(client.store.transitions.claim(queue, owner, limit=limit, lease=lease, now=now))


def claim_one(client: Any, owner: str = "w1", queue: str = "default", **options: Any) -> Any:
    claimed = claim(client, owner, queue, **options)
    assert len(claimed) == 1, claimed
    return claimed[0]


def held(job: Any) -> Any:
    return job if isinstance(job, Held) else job.held


def succeed(client: Any, jobs: Sequence[Any], *, result: str | None = None, now: Any = None) -> set[int]:
    outcomes = [Outcome(held(j), SUCCEEDED, result=result) for j in jobs]
    return set(client.store.transitions.complete(outcomes, now=now))


def fail(
    client: Any, job: Any, *, error: str = "x", retry_in: float = 0.0, kind: str = FAILED, now: Any = None
) -> str | None:
    status = client.store.transitions.fail(Outcome(held(job), kind, error, retry_in), now=now)
    return None if status is None else str(status)


def release(client: Any, jobs: Sequence[Any], *, now: Any = None) -> set[int]:
    return set(client.store.transitions.release([held(j) for j in jobs], now=now))


# -- processes ---------------------------------------------------------------------------------

TESTS = Path(__file__).parent


def run_jobsup(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """The real `jobsup` command (``python -m jobsup``), with the tests' job apps importable."""
    environment = {**os.environ, "PYTHONPATH": str(TESTS), **(env or {})}
    environment.pop("JOBSUP_FAULTS", None)
    command = [sys.executable, "-m", "jobsup", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=environment, timeout=timeout)


def without_modules(directory: Path, *names: str) -> dict[str, str]:
    """The environment for `run_jobsup` in which `names` do not import, as on a machine
    without their extra: a module of each name, first on the path, raises the ImportError
    a missing package raises."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        missing = f"No module named {name!r}"
        (directory / f"{name}.py").write_text(f"raise ModuleNotFoundError({missing!r}, name={name!r})\n")
    return {"PYTHONPATH": os.pathsep.join([str(directory), str(TESTS)])}


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between open and read
        return False
    return "State:\tZ" not in status


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of a PostgreSQL EXPLAIN (FORMAT JSON) plan, depth first."""
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(plan_nodes(child))
    return found


def run_together(threads: Sequence[threading.Thread], *, timeout: float = 60) -> None:
    """Start `threads` (competing instances, each on its own connection) and wait for all."""
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)


def lock_waiters(url: str) -> int:
    """How many of `url`'s database sessions wait for a row lock now (PostgreSQL, MariaDB)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if engine.dialect.name not in ("mysql", "mariadb"):
                waiting = text(
                    "SELECT COUNT(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND datname = current_database()"
                )
                return int(conn.execute(waiting).scalar_one())
            return mariadb_lock_waits(conn)
    finally:
        engine.dispose()


def mariadb_lock_waits(conn: Any) -> int:
    """How many sessions of `conn`'s MariaDB database wait for a lock now (not another
    database's: tests run side by side)."""
    return len(_mariadb_lock_waiters(conn) & _mariadb_sessions(conn))


def _mariadb_lock_waiters(conn: Any) -> set[int]:
    """The thread ids of the MariaDB server's transactions waiting for a lock, from SHOW ENGINE
    INNODB STATUS. Not information_schema.INNODB_TRX: InnoDB refreshes that table's cache only
    once nobody has read it for 0.1 s, so pollers that read it more often (two tests each
    polling every 50 ms) saw it unchanged for half a minute while their sessions waited."""
    status = conn.execute(text("SHOW ENGINE INNODB STATUS")).one()[2]
    waiting = set()
    for transaction in status.split("---TRANSACTION ")[1:]:
        thread = re.search(r"(?:MariaDB|MySQL) thread id (\d+)", transaction)
        if thread is not None and "\nLOCK WAIT " in transaction:
            waiting.add(int(thread.group(1)))
    return waiting


def _mariadb_sessions(conn: Any) -> set[int]:
    """The ids of the sessions using this connection's database."""
    rows = conn.execute(text("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE()"))
    return {int(row[0]) for row in rows}


def in_new_york(url: str) -> str:
    """`url` with its sessions in New York's time zone (a PostgreSQL URL): what a session zone
    other than UTC changes shows there."""
    zoned = make_url(url).update_query_dict({"options": "-c TimeZone=America/New_York"})
    return zoned.render_as_string(hide_password=False)
