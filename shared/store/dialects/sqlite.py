"""SQLite: the embedded default, for one host.

Quirks and limits:
- One writer at a time. Every write transaction starts with BEGIN IMMEDIATE, so a
  transaction that reads and then writes never fails on a lock upgrade; waiting writers
  queue on the busy timeout (30 s).
- A claim reads candidates first with no transaction at all (an idle poll must not take
  the write lock), then in BEGIN IMMEDIATE updates them while rechecking *every* condition
  of the read: a job claimed or finished between the two is not claimed again.
- WAL journal by default (readers do not block the writer) with synchronous=NORMAL: a
  process crash loses nothing, a power loss may lose the last commits. ``?journal_mode=delete``
  selects the rollback journal, ``?synchronous=full`` syncs every commit.
- Lock waits are not fair: a busy claimer can win the write lock many times in a row.
- No database clock: the reference clock is the host's, bound into each statement.
- No notifications: each idle worker waits on a FIFO of its own under
  ``<database>-jobsup/wake/``, which an enqueue pokes once it has committed
  (`jobsup.store.dialects.wakeup`); the 1 s poll finds whatever a lost poke would have
  announced.
- No data-modifying CTEs: two dependent writes run as two statements in one transaction.
- No database clock, one host: the sweep never expires the lease of an owner that is still
  alive here, whatever the wall clock did (an NTP step or a resume from suspend would
  otherwise expire every running job). Each worker holds an exclusive `flock` on a file of
  its own under ``<database>-jobsup/owners/`` for its whole life; the kernel drops it when
  the process dies, however it dies, so the sweep asks the lock rather than the clock.
- The database file is created with mode 0600 (SQLite gives its -wal and -shm files the
  database file's mode): payloads are not for other users of the host.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Float,
    Integer,
    Row,
    Select,
    Table,
    Update,
    bindparam,
    create_engine,
    event,
    func,
    literal,
    select,
    update,
)
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from jobsup.clock import host_clock
from jobsup.errors import DatabaseError, DatabaseUnavailable, SchemaOutdated
from jobsup.store.claim import (
    CLAIM_COLUMNS,
    CLAIM_ORDER,
    claim_values,
    claimable,
)
from jobsup.store.dialects import AfterClaim, Connections
from jobsup.store.dialects.common import (
    FilteredKeyIndex,
    NativeReturning,
    NoDriverText,
    RowByRowInsert,
    SavepointInsert,
    SequentialChain,
)
from jobsup.store.dialects.fences import RowValueFence
from jobsup.store.dialects.types import UTCDateTime
from jobsup.store.dialects.wakeup import FifoListener, poke
from jobsup.store.schema import job

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

_BEGIN = "jobsup_sqlite_begin"  # execution option: which BEGIN to emit, None for none
_JOURNAL_MODES = {"wal", "delete", "truncate", "persist"}
_SYNCHRONOUS = {"off", "normal", "full", "extra"}
_CLAIM_ROUNDS = 3


class OwnerFile:
    """An owner's lock file, locked exclusively while the owner lives."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)


def database_path(url: URL) -> Path | None:
    """The database file of a SQLite URL; None for an in-memory database."""
    name = url.database
    if not name or name == ":memory:" or name.startswith("file:"):
        return None  # (a file: URI is not supported as a place for the owner locks)
    return Path(name).resolve()  # every instance names one file the same, however it reached it


def owners_folder(url: URL) -> Path | None:
    return _beside(url, "owners")


def wake_folder(url: URL) -> Path | None:
    """Where idle workers' FIFOs wait for pokes (`jobsup.store.dialects.wakeup`)."""
    return _beside(url, "wake")


def _beside(url: URL, name: str) -> Path | None:
    path = database_path(url)
    return None if path is None else path.with_name(path.name + "-jobsup") / name


def _owner_file(owner: str) -> str:
    return hashlib.sha1(owner.encode()).hexdigest()[:24] + ".lock"


def _locked(path: Path) -> bool:
    """Whether a live process holds `path`'s lock. A file nobody holds belongs to an owner
    that died; it is removed."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        path.unlink()
    return False


def _create_private(path: Path) -> None:
    """Create the database file 0600 before SQLite does (it would use the umask)."""
    with contextlib.suppress(FileExistsError, FileNotFoundError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


class SQLiteDialect(
    NativeReturning, SequentialChain, RowValueFence, RowByRowInsert, FilteredKeyIndex, SavepointInsert, NoDriverText
):
    name = "sqlite"
    transaction_options: Mapping[str, Any] = {_BEGIN: "BEGIN IMMEDIATE"}
    atomic_insert_rows = sys.maxsize  # its statement() is a transaction too (BEGIN IMMEDIATE)
    bulk_chunk = 0  # built whole first: its one write lock would be held while Python builds
    read_options: Mapping[str, Any] = {_BEGIN: None}
    statement_options: Mapping[str, Any] = {}

    def create_engine(self, url: URL) -> Engine:
        engine: Engine = self._configured(create_engine, url)
        return engine

    def create_async_engine(self, url: URL) -> AsyncEngine:
        from sqlalchemy.ext.asyncio import create_async_engine

        engine: AsyncEngine = self._configured(create_async_engine, url.set(drivername="sqlite+aiosqlite"))
        return engine

    def _configured(self, factory: Callable[..., Any], url: URL) -> Any:
        """An engine from `factory` (sync or async) with jobsup's pragmas and BEGIN."""
        journal = url.query.get("journal_mode", "wal")
        if isinstance(journal, tuple) or journal.lower() not in _JOURNAL_MODES:
            from jobsup.errors import ConfigurationError

            raise ConfigurationError(f"journal_mode={journal!r}: use one of {sorted(_JOURNAL_MODES)}")
        # WAL with synchronous=NORMAL survives any process crash; only a power loss may undo
        # the last transactions. ?synchronous=full in the URL trades speed for that too.
        synchronous = url.query.get("synchronous", "normal" if journal.lower() == "wal" else "full")
        if isinstance(synchronous, tuple) or synchronous.lower() not in _SYNCHRONOUS:
            from jobsup.errors import ConfigurationError

            raise ConfigurationError(f"synchronous={synchronous!r}: use one of {sorted(_SYNCHRONOUS)}")
        path = database_path(url)
        if path is not None:
            _create_private(path)
        engine = factory(url.difference_update_query(["journal_mode", "synchronous"]), connect_args={"timeout": 30.0})
        sync_engine = getattr(engine, "sync_engine", engine)  # an async engine's events are its sync engine's

        @event.listens_for(sync_engine, "connect")
        def connect(dbapi_connection: Any, _record: Any) -> None:
            # Take BEGIN away from the sqlite3 module (it would defer it past our reads).
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA journal_mode={journal.lower()}")
            cursor.execute(f"PRAGMA synchronous={synchronous.lower()}")
            cursor.close()

        @event.listens_for(sync_engine, "begin")
        def begin(conn: Connection) -> None:
            mode = conn.get_execution_options().get(_BEGIN, "BEGIN IMMEDIATE")
            if mode is not None:
                conn.exec_driver_sql(mode)

        return engine

    def single_statement_engine(self, engine: Engine) -> Engine:
        return engine  # the BEGIN hook already decides per connection (see read_options)

    def clock(self, offset: str | None = None) -> ColumnElement[datetime]:
        # No database clock: the host's instant (and each offset from it) is bound.
        return bindparam("p_now" if offset is None else f"p_now_{offset}", type_=UTCDateTime)

    def instant(self, conn: Connection) -> datetime:
        return host_clock()

    def clock_params(self, now: datetime | None, **offsets: float) -> dict[str, Any]:
        base = now or host_clock()
        return {"p_now": base, **{f"p_now_{name}": base + timedelta(seconds=s) for name, s in offsets.items()}}

    def seconds_between(self, start: ColumnElement[Any], end: ColumnElement[Any]) -> ColumnElement[float]:
        # The stored ISO text parses as it is; julianday keeps milliseconds.
        return (func.julianday(end) - func.julianday(start)) * literal(86400.0, Float)

    def claim(self, db: Connections, params: Mapping[str, Any], after: AfterClaim | None) -> Sequence[Sequence[Any]]:
        for _ in range(_CLAIM_ROUNDS):
            candidates = self.claim_candidates(db, params)
            if not candidates:
                return []
            claimed = self.claim_update(db, candidates, params, after)
            if claimed:
                return claimed
            # Every candidate went to another claimer while we waited for the write lock:
            # there may well be more work, so look again (a bounded number of times).
        return []

    def claim_candidates(self, db: Connections, params: Mapping[str, Any]) -> list[int]:
        """The read half of a claim: takes no lock."""
        with db.read("claim") as conn:
            return list(conn.execute(self.candidates_statement, params).scalars())

    @cached_property
    def candidates_statement(self) -> Select[Any]:
        return (
            select(job.c.id)
            .where(claimable(self.clock()))
            .order_by(*CLAIM_ORDER)
            .limit(bindparam("p_limit", type_=Integer))
        )

    @cached_property
    def claim_update_statement(self) -> Update:
        clock = self.clock()
        return (
            update(job)
            .where(job.c.id.in_(bindparam("p_ids", expanding=True)), claimable(clock, recheck=True))
            .values(claim_values(clock, self.clock("lease")))
            .returning(*CLAIM_COLUMNS, job.c.run_at.label("due"))  # an unreadable run_at reads as None
        )

    def claim_update(
        self, db: Connections, ids: list[int], params: Mapping[str, Any], after: AfterClaim | None
    ) -> Sequence[Row[Any]]:
        """The write half: rechecks every condition of the read, so a row that changed
        since is skipped."""
        with db.transaction("claim") as conn:
            rows = conn.execute(self.claim_update_statement, {**params, "p_ids": ids}).all()
            if rows:
                position = {job_id: index for index, job_id in enumerate(ids)}
                rows = sorted(rows, key=lambda row: position[row.id])  # RETURNING has no order
                if after is not None:
                    rows = after(conn, rows)
        return rows

    def after_enqueue(self, conn: Connection, queues: set[str]) -> None:
        """Poke the idle workers of `queues` once the enqueue has committed."""
        from jobsup.store.database import after_commit, runs_after_commit

        folder = wake_folder(conn.engine.url)
        if folder is not None:
            early = not runs_after_commit(conn)
            after_commit(conn, lambda: poke(folder, queues, early=early))

    def listener(self, db: Any, queue: str) -> FifoListener | None:
        folder = wake_folder(db.url)
        if folder is None:
            return None  # in memory: one process, and it polls
        try:
            return FifoListener(folder, queue)
        except OSError as exc:
            raise DatabaseUnavailable(f"cannot wait for wakeups in {folder}: {exc}") from None

    def wakeup_warning(self, db: Any) -> str | None:
        return None

    def hold_owner(self, db: Any, owner: str) -> OwnerFile | None:
        folder = owners_folder(db.url)
        if folder is None:
            return None  # an in-memory database lives and dies with its one process
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = folder / _owner_file(owner)
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return OwnerFile(fd, path)

    def owners_alive(self, db: Any, owners: set[str]) -> set[str]:
        folder = owners_folder(db.url)
        if folder is None:
            return set()
        return {owner for owner in owners if _locked(folder / _owner_file(owner))}

    def lock_rows(self, stmt: Select[Any], *, skip_locked: bool, table: Table | None = None) -> Select[Any]:
        return stmt  # BEGIN IMMEDIATE: no other writer runs until this transaction ends

    def migration_lock(self, conn: Connection) -> None:
        """Nothing more to do: the migration's transaction began with BEGIN EXCLUSIVE."""

    one_writer = True
    connections_ahead = 0  # its claims and their writes run in transactions, or one at a time
    locking_reads_outrun_snapshot = False
    locks_in_process = True
    default_poll_interval = 1.0
    migration_options: Mapping[str, Any] = {_BEGIN: "BEGIN EXCLUSIVE"}

    def lock_within(self, conn: Connection, seconds: float) -> AbstractContextManager[None]:
        return nullcontext()  # writers take turns: a transaction holds no row lock another waits on

    def classify(self, error: DBAPIError) -> type[DatabaseError]:
        text = str(error.orig).lower()
        if "no such table" in text:
            return SchemaOutdated
        if "unable to open" in text or "disk i/o" in text:
            return DatabaseUnavailable
        return DatabaseError
