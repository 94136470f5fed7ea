"""`jobsup.AsyncClient`: `Client` for asyncio applications.

It runs the very code of `Client` (its checks, the store's transitions and statements) on
SQLAlchemy's asyncio engine: each call borrows a connection from the engine and runs the
synchronous store code inside `AsyncConnection.run_sync`, where the async driver (psycopg's
async mode, aiosqlite) does the I/O and the event loop stays free while it waits. SQLite and
PostgreSQL; SQL Server has no async driver here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from jobsup.client import Client, url_enabling_outbox
from jobsup.store.bound import BoundDatabase
from jobsup.store.builder import EnqueueOptions
from jobsup.store.dialects import dialect_for, normalise_url
from jobsup.store.rows import Job

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection

T = TypeVar("T")


class AsyncClient:
    """A handle on one jobsup database for asyncio code: `enqueue`, `enqueue_many`, `get`,
    `cancel`, `list_jobs`, each awaited, with `Client`'s arguments and errors. With
    ``connection=`` (your `AsyncConnection`, in a transaction) the jobs are written in your
    transaction. Close it with ``await client.close()``."""

    def __init__(self, database_url: str | None = None) -> None:
        url = normalise_url(url_enabling_outbox(database_url))
        dialect = dialect_for(url)
        self.engine = dialect.create_async_engine(url)
        self._db = BoundDatabase(url, dialect, self.engine.sync_engine)
        self._client = Client(database=self._db)

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

    async def cancel(self, job_id: int, *, actor: str | None = None) -> bool:
        """See `Client.cancel` (audited alike)."""
        return await self._run(lambda _: self._client.cancel(job_id, actor=actor))

    async def list_jobs(
        self, *, status: str | None = None, queue: str | None = None, limit: int = 100, sla_breached: bool = False
    ) -> list[Job]:
        """See `Client.list_jobs`."""
        found = self._client.list_jobs
        return await self._run(lambda _: found(status=status, queue=queue, limit=limit, sla_breached=sla_breached))

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
