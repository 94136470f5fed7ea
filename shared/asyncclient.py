"""`jobsup.AsyncClient`: `Client` for asyncio applications.

It runs the very code of `Client` (its checks, the store's transitions and statements) on
SQLAlchemy's asyncio engine: each call borrows a connection from the engine and runs the
synchronous store code inside `AsyncConnection.run_sync`, where the async driver (psycopg's
async mode, aiosqlite) does the I/O and the event loop stays free while it waits. SQLite and
PostgreSQL; SQL Server has no async driver here.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from jobsup.client import Client, url_enabling_outbox
from jobsup.client.core import row_id
from jobsup.client.waiting import Waiting, finished
from jobsup.errors import BadInput
from jobsup.store.bound import BoundDatabase
from jobsup.store.builder import EnqueueOptions
from jobsup.store.dialects import dialect_for, normalise_url
from jobsup.store.rows import Definition, Job, LogLine, RecurringSchedule

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection

T = TypeVar("T")


class AsyncClient:
    """A handle on one jobsup database for asyncio code: `Client`'s calls and its parts
    (``await client.workflows.enqueue(...)``, ``await client.queues.pause(...)``), each
    awaited, with `Client`'s arguments and errors. With ``connection=`` (your
    `AsyncConnection`, in a transaction) the jobs are written in your transaction. Close it
    with ``await client.close()``."""

    def __init__(self, database_url: str | None = None) -> None:
        url = normalise_url(url_enabling_outbox(database_url))
        dialect = dialect_for(url)
        self.engine = dialect.create_async_engine(url)
        self._db = BoundDatabase(url, dialect, self.engine.sync_engine)
        self._client = client = Client(database=self._db)
        self.workflows = Awaited(self, client.workflows)
        self.batches = Awaited(self, client.batches, refused={"open": _OPEN_BATCH})
        self.schedules = Awaited(self, client.schedules)
        self.calendars = Awaited(self, client.calendars)
        self.queues = Awaited(self, client.queues)
        self.breakers = Awaited(self, client.breakers)
        self.workers = Awaited(self, client.workers)
        self.events = Awaited(self, client.events)
        self.audit = Awaited(self, client.audit)
        self.dead_letters = Awaited(self, client.dead_letters)

    async def enqueue(
        self,
        name: str,
        payload: Any = None,
        *,
        connection: AsyncConnection | None = None,
        allow_unknown: bool = False,
        **options: Unpack[EnqueueOptions],
    ) -> int:
        """See `Client.enqueue`."""

        def work(mine: Connection | None) -> int:
            return self._client.enqueue(name, payload, connection=mine, allow_unknown=allow_unknown, **options)

        return await self._run(work, connection)

    async def enqueue_many(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        connection: AsyncConnection | None = None,
        allow_unknown: bool = False,
    ) -> list[int]:
        """See `Client.enqueue_many`."""
        specs = list(jobs)
        return await self._run(
            lambda mine: self._client.enqueue_many(specs, connection=mine, allow_unknown=allow_unknown), connection
        )

    async def get(self, job_id: int) -> Job | None:
        """See `Client.get`."""
        return await self._run(lambda _: self._client.get(job_id))

    async def wait(self, job_id: int, timeout: float | str | timedelta | None = None) -> Job:
        """See `Client.wait`: the event loop is free between looks."""
        waiting = Waiting(row_id(job_id), timeout)
        while not finished(job := waiting.seen(await self.get(job_id))):
            await asyncio.sleep(waiting.next_pause(job))
        return job

    async def cancel(self, job_id: int, *, actor: str | None = None) -> bool:
        """See `Client.cancel` (audited alike)."""
        return await self._run(lambda _: self._client.cancel(job_id, actor=actor))

    async def list_jobs(
        self, *, status: str | None = None, queue: str | None = None, limit: int = 100, sla_breached: bool = False
    ) -> list[Job]:
        """See `Client.list_jobs`."""
        found = self._client.list_jobs
        return await self._run(lambda _: found(status=status, queue=queue, limit=limit, sla_breached=sla_breached))

    async def logs(self, job_id: int, *, after_id: int | None = None, limit: int = 1000) -> list[LogLine]:
        """See `Client.logs`."""
        return await self._run(lambda _: self._client.logs(job_id, after_id=after_id, limit=limit))

    async def definitions(self) -> list[Definition]:
        """See `Client.definitions`."""
        return await self._run(lambda _: self._client.definitions())

    async def add_recurring(self, name: str, **options: Any) -> RecurringSchedule:
        """See `Client.add_recurring` (its keyword arguments; audited alike)."""
        return await self._run(lambda _: self._client.add_recurring(name, **options))

    async def close(self) -> None:
        await self.engine.dispose()

    async def _run(self, work: Callable[[Connection | None], T], connection: AsyncConnection | None = None) -> T:
        """`work` on a connection of the engine (or the caller's), inside run_sync; it is
        given the caller's connection, or None."""
        with self._db.errors():  # a refused connection reads like Client's
            if connection is not None:
                result: T = await connection.run_sync(self._lent, work, True)
                return result
            async with self.engine.connect() as conn:
                result = await conn.run_sync(self._lent, work, False)
                return result

    def _lent(self, conn: Connection, work: Callable[[Connection | None], T], theirs: bool) -> T:
        with self._db.lent(conn, theirs=theirs):
            return work(conn if theirs else None)


_OPEN_BATCH = (
    "an open batch is added to over several calls, which AsyncClient does not hold open: "
    "use batches.enqueue, or jobsup.Client"
)


class Awaited:
    """One of `Client`'s parts (`client.workflows`, ...) with each method awaited: run, as
    `AsyncClient`'s own calls are, inside ``run_sync`` on a connection of the asyncio engine,
    or on the caller's `AsyncConnection` given as ``connection=``."""

    def __init__(self, owner: AsyncClient, part: object, refused: Mapping[str, str] | None = None) -> None:
        self._owner, self._part, self._refused = owner, part, dict(refused or {})

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name.startswith("_"):  # before any attribute of ours is read (copy, pickle)
            raise AttributeError(name)
        method = getattr(self._part, name)
        if not callable(method):
            raise AttributeError(name)
        refused = self._refused.get(name)
        takes_connection = "connection" in inspect.signature(method).parameters

        async def awaited(*args: Any, connection: AsyncConnection | None = None, **kwargs: Any) -> Any:
            if refused is not None:
                raise BadInput(f"AsyncClient: {refused}")
            if connection is not None and not takes_connection:
                raise BadInput(f"{name} takes no connection=: it runs in a transaction of its own")

            def work(mine: Connection | None) -> Any:
                return method(*args, **kwargs) if mine is None else method(*args, connection=mine, **kwargs)

            return await self._owner._run(work, connection)

        return awaited
