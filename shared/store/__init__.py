"""Every statement of the job state machine (DESIGN section 4), written once.

The store knows jobs and SQL, and nothing of loops or processes. Each transition is a
compare-and-set: an UPDATE whose WHERE names the state it expects, and the rows it returns
say whether it happened. Worker-side writes are fenced on the `Lease` (id, owner, attempt),
so a stale worker's write changes nothing. Every time-dependent operation takes an
optional `now`; without it the dialect's reference clock is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Connection,
    Insert,
    Update,
    and_,
    bindparam,
    case,
    delete,
    func,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from jobsup.clock import host_clock
from jobsup.errors import ConstraintViolation, DuplicateJob, SchemaOutdated
from jobsup.store.claim import claim_params, status_is
from jobsup.store.database import Database
from jobsup.store.rows import Attempt, ClaimedJob, Job, Lease, NewJob, decode_stored
from jobsup.store.schema import (
    CANCELLED,
    DEAD_LETTERED,
    LIVE_STATUSES,
    PENDING,
    RUNNING,
    SCHEMA_REVISION,
    SUCCEEDED,
    VERSION_TABLE,
    job,
    job_attempt,
)

_BATCH = 1000


class Store:
    """The jobsup tables of one database."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.dialect = db.dialect

    # -- schema ----------------------------------------------------------------------------

    def schema_check(self) -> None:
        """Raise `SchemaOutdated` unless the schema is at this code's revision."""
        from sqlalchemy import column, table

        version = table(VERSION_TABLE, column("version_num"))
        try:
            with self.db.read("schema") as conn:
                found = conn.execute(select(version.c.version_num)).scalars().all()
        except SchemaOutdated:
            found = []
        if SCHEMA_REVISION not in found:
            have = ", ".join(found) or "no jobsup schema"
            raise SchemaOutdated(
                f"the database {self.db.safe_url} has {have}, this jobsup needs revision "
                f"{SCHEMA_REVISION}: run `jobsup db upgrade`"
            )

    # -- enqueue ---------------------------------------------------------------------------

    def job_enqueue(
        self,
        jobs: Sequence[NewJob],
        *,
        connection: Connection | None = None,
        now: datetime | None = None,
    ) -> list[int]:
        """Insert `jobs`; return their ids in order. A job whose unique key belongs to a live
        job is not inserted: the live job's id is returned in its place."""
        if connection is not None:
            with self.db.errors():
                return self._enqueue_on(connection, jobs, now)
        with self.db.transaction("enqueue") as conn:
            return self._enqueue_on(conn, jobs, now)

    @cached_property
    def _insert(self) -> Insert:
        clock = self.dialect.clock()
        return (
            job.insert()
            .values(
                status=PENDING,
                attempts=0,
                run_at=func.coalesce(bindparam("p_run_at", type_=job.c.run_at.type), clock),
                created_at=clock,
                updated_at=clock,
            )
            .returning(job.c.id, sort_by_parameter_order=True)
        )

    def _enqueue_on(self, conn: Connection, jobs: Sequence[NewJob], now: datetime | None) -> list[int]:
        clock = self.dialect.clock_params(now)
        host_now = now or host_clock()
        params = [{**_insert_params(new, host_now), **clock} for new in jobs]
        ids: list[int | None] = [None] * len(jobs)
        plain = [i for i, new in enumerate(jobs) if new.unique_key is None]
        if plain:
            inserted = conn.execute(self._insert, [params[i] for i in plain]).scalars().all()
            for i, job_id in zip(plain, inserted, strict=True):
                ids[i] = job_id
        for i, new in enumerate(jobs):
            if new.unique_key is not None:
                ids[i] = self._enqueue_unique(conn, params[i], new.unique_key)
        self.dialect.after_enqueue(conn, {new.queue for new in jobs})
        return [job_id for job_id in ids if job_id is not None]

    def _enqueue_unique(self, conn: Connection, params: dict[str, Any], key: str) -> int:
        # The filtered unique index decides, so this holds across processes. The insert
        # runs in a savepoint so that losing the race does not abort the caller's transaction.
        live = select(job.c.id).where(job.c.unique_key == key, job.c.status.in_(LIVE_STATUSES))
        for _ in range(5):
            try:
                with conn.begin_nested():
                    return int(conn.execute(self._insert, params).scalar_one())
            except IntegrityError:
                existing = conn.execute(live).scalar()
                if existing is not None:
                    return int(existing)
                # The live job finished between our insert and our look: insert again.
        raise DuplicateJob(f"unique key {key!r} is contended; try again")

    # -- worker side -----------------------------------------------------------------------
    # The hot statements are built once, with bound parameters, so that a claim or a settle
    # costs one cached statement instead of building and compiling SQL every time.

    def job_claim(
        self, queue: str, owner: str, *, limit: int = 1, lease: float, now: datetime | None = None
    ) -> list[ClaimedJob]:
        """Claim up to `limit` due jobs of `queue` for `owner`, each for `lease` seconds."""
        params = claim_params(self.dialect, queue=queue, owner=owner, limit=limit, lease=lease, now=now)
        rows = self.dialect.claim(self.db, params)
        return [ClaimedJob(*tuple(row)) for row in rows]

    @cached_property
    def _renew(self) -> Update:
        return (
            update(job)
            .where(self._fence)
            .values(lease_expires_at=self.dialect.clock("lease"), updated_at=self.dialect.clock())
            .returning(job.c.id)
        )

    def job_renew_lease(self, leases: Sequence[Lease], *, lease: float, now: datetime | None = None) -> set[int]:
        """Extend the leases still held; return the ids renewed (missing ones were lost)."""
        if not leases:
            return set()
        params = {**self.dialect.clock_params(now, lease=lease), **self._fence_params(leases)}
        with self.db.statement("renew") as conn:
            return set(conn.execute(self._renew, params).scalars())

    @cached_property
    def _complete(self) -> Any:
        clock = self.dialect.clock()
        first = (
            update(job)
            .where(self._fence)
            .values(
                status=SUCCEEDED,
                finished_at=clock,
                updated_at=clock,
                lease_owner=None,
                lease_expires_at=None,
                result=bindparam("p_result"),
            )
            .returning(job.c.id)
        )
        return self.dialect.chain(first, self._close_attempts)

    def job_complete(
        self, leases: Sequence[Lease], *, result: str | None = None, now: datetime | None = None
    ) -> set[int]:
        """Settle attempts as succeeded; return the ids settled (a stale lease settles nothing)."""
        if not leases:
            return set()
        params = {
            **self.dialect.clock_params(now),
            **self._fence_params(leases),
            "p_result": result,
            "p_outcome": "succeeded",
            "p_error": None,
        }
        return {row[0] for row in self.dialect.run_chain(self.db, self._complete, params, "settle")}

    def _fail(self, *, expired_only: bool) -> Any:
        clock = self.dialect.clock()
        dead = or_(bindparam("p_discard", type_=Boolean), job.c.attempts >= job.c.max_attempts)
        first = (
            update(job)
            .where(self._fence, *((job.c.lease_expires_at < clock,) if expired_only else ()))
            .values(
                status=case((dead, DEAD_LETTERED), else_=PENDING),
                run_at=case((dead, job.c.run_at), else_=self.dialect.clock("retry")),
                finished_at=case((dead, clock), else_=null()),
                last_error=bindparam("p_error"),
                updated_at=clock,
                lease_owner=None,
                lease_expires_at=None,
            )
            .returning(job.c.id, job.c.status)
        )
        return self.dialect.chain(first, self._close_attempts)

    @cached_property
    def _fail_any(self) -> Any:
        return self._fail(expired_only=False)

    @cached_property
    def _fail_expired(self) -> Any:
        return self._fail(expired_only=True)

    def job_fail(
        self,
        lease: Lease,
        *,
        outcome: str,
        error: str,
        retry_in: float,
        discard: bool = False,
        now: datetime | None = None,
        expired_only: bool = False,
        operation: str = "settle",
    ) -> str | None:
        """End an attempt that did not succeed (`failed`, `timed_out`, `lease_expired`).

        The job goes back to pending after `retry_in` seconds, or is dead-lettered when it
        has no attempts left or `discard` is set. `expired_only` also requires the lease to
        have lapsed (the sweep's compare-and-set). Returns the new status, or None when the
        lease was no longer held (nothing changed)."""
        params = {
            **self.dialect.clock_params(now, retry=retry_in),
            **self._fence_params([lease]),
            "p_discard": discard,
            "p_error": error,
            "p_outcome": outcome,
        }
        chain = self._fail_expired if expired_only else self._fail_any
        rows = self.dialect.run_chain(self.db, chain, params, operation)
        return str(rows[0].status) if rows else None

    @cached_property
    def _release(self) -> Any:
        first = (
            update(job)
            .where(self._fence)
            .values(
                status=PENDING,
                attempts=job.c.attempts - 1,
                updated_at=self.dialect.clock(),
                lease_owner=None,
                lease_expires_at=None,
            )
            .returning(job.c.id)
        )
        return self.dialect.chain(first, self._close_attempts)

    def job_release(self, lease: Lease, *, now: datetime | None = None) -> bool:
        """Give a job back without using up its attempt (shutdown); False if the lease was lost."""
        params = {
            **self.dialect.clock_params(now),
            **self._fence_params([lease]),
            "p_outcome": "released",
            "p_error": None,
        }
        return bool(self.dialect.run_chain(self.db, self._release, params, "release"))

    @cached_property
    def _fence(self) -> ColumnElement[bool]:
        """The compare-and-set of every worker-side write: still held by the bound owner
        `p_owner`, at the bound attempts (id, attempt pairs).

        A lease owner is set exactly while a job is running (the claim sets it, every
        transition out of running clears it; `test_a_lease_owner_is_set_exactly_while_running`
        holds the store to it), so the owner match also says "still running". Leaving the
        status out keeps PostgreSQL's planner on the primary key: with `status = 'running'`
        it scans the lease index instead, dead entries and all."""
        return and_(
            job.c.lease_owner == bindparam("p_owner"),
            job.c.id.in_(bindparam("p_fence_ids", expanding=True)),
            self.dialect.attempt_match(),
        )

    def _fence_params(self, leases: Sequence[Lease]) -> dict[str, Any]:
        owners = {lease.owner for lease in leases}
        if len(owners) != 1:
            raise ValueError("one fenced write covers the leases of one owner")
        return {
            "p_owner": owners.pop(),
            "p_fence_ids": [lease.job_id for lease in leases],
            **self.dialect.attempt_params(leases),
        }

    def _close_attempts(self, job_ids: Any) -> Update:
        """The second half of every transition out of `running`: close the job's open attempt."""
        return (
            update(job_attempt)
            .where(job_attempt.c.job_id.in_(job_ids), job_attempt.c.finished_at.is_(None))
            .values(finished_at=self.dialect.clock(), outcome=bindparam("p_outcome"), error=bindparam("p_error"))
        )

    # -- maintenance -----------------------------------------------------------------------

    def job_expire_leases(
        self,
        retry_in: Callable[[str, int], float],
        *,
        owner: str | None = None,
        limit: int = _BATCH,
        now: datetime | None = None,
    ) -> int:
        """Close leases that lapsed (or, with `owner`, every lease of a worker known dead):
        the attempt ends `lease_expired` and the job retries after `retry_in(name, attempt)` or is
        dead-lettered. Returns how many were closed."""
        clock = self.dialect.clock()
        found = and_(status_is(RUNNING), job.c.lease_owner == owner if owner else job.c.lease_expires_at < clock)
        with self.db.read("maintenance") as conn:
            rows = conn.execute(
                select(job.c.id, job.c.lease_owner, job.c.attempts, job.c.name).where(found).limit(limit),
                self.dialect.clock_params(now),
            ).all()
        closed = 0
        for job_id, lease_owner, attempt, name in rows:
            status = self.job_fail(
                Lease(job_id, lease_owner, attempt),
                outcome="lease_expired",
                error="lease expired: the worker died or stopped renewing",
                retry_in=retry_in(name, attempt),
                now=now,
                expired_only=owner is None,
                operation="maintenance",
            )
            closed += status is not None
        return closed

    # -- operator side ---------------------------------------------------------------------

    def job_get(self, job_id: int) -> Job | None:
        with self.db.read("inspect") as conn:
            row = conn.execute(select(job).where(job.c.id == job_id)).first()
            if row is None:
                return None
            attempts = conn.execute(
                select(job_attempt).where(job_attempt.c.job_id == job_id).order_by(job_attempt.c.id)
            ).all()
        history = tuple(Attempt(a.attempt, a.outcome, a.owner, a.started_at, a.finished_at, a.error) for a in attempts)
        return _job(row, history)

    def job_list(
        self,
        *,
        status: str | None = None,
        queue: str | None = None,
        limit: int = 100,
        order_by: Iterable[Any] = (job.c.id.desc(),),
    ) -> list[Job]:
        stmt = select(job).order_by(*order_by).limit(limit)
        if status is not None:
            stmt = stmt.where(status_is(status))
        if queue is not None:
            stmt = stmt.where(job.c.queue == queue)
        with self.db.read("inspect") as conn:
            return [_job(row, ()) for row in conn.execute(stmt)]

    def job_cancel(self, job_id: int, *, now: datetime | None = None) -> bool:
        """Cancel a pending or running job; a running one's worker sees its lease gone and
        sets the job's cancel event. False when the job was not live."""
        params = {**self.dialect.clock_params(now), "p_job": job_id, "p_outcome": "cancelled", "p_error": None}
        return bool(self.dialect.run_chain(self.db, self._cancel, params, "cancel"))

    @cached_property
    def _cancel(self) -> Any:
        clock = self.dialect.clock()
        first = (
            update(job)
            .where(job.c.id == bindparam("p_job"), job.c.status.in_(LIVE_STATUSES))
            .values(status=CANCELLED, finished_at=clock, updated_at=clock, lease_owner=None, lease_expires_at=None)
            .returning(job.c.id)
        )
        return self.dialect.chain(first, self._close_attempts)

    def job_retry_dead(self, job_ids: Sequence[int], *, now: datetime | None = None) -> list[int]:
        """Put dead-lettered jobs back to pending with fresh attempts; return those retried.
        A job whose unique key a live job now holds raises `DuplicateJob`."""
        clock = self.dialect.clock()
        stmt = (
            update(job)
            .where(job.c.id == bindparam("p_job"), status_is(DEAD_LETTERED))
            .values(status=PENDING, attempts=0, run_at=clock, updated_at=clock, finished_at=None)
            .returning(job.c.id)
        )
        retried: list[int] = []
        for job_id in job_ids:
            try:
                with self.db.statement("dead_letters") as conn:
                    retried.extend(conn.execute(stmt, {**self.dialect.clock_params(now), "p_job": job_id}).scalars())
            except ConstraintViolation:
                raise DuplicateJob(
                    f"job {job_id} cannot be retried: a live job holds its unique key",
                    existing_id=None,
                ) from None
        return retried

    def job_counts(
        self, statuses: Sequence[str], *, now: datetime | None = None
    ) -> tuple[dict[tuple[str, str], int], dict[str, datetime | None]]:
        """Jobs per (queue, status) among `statuses`, and each queue's oldest due pending run_at."""
        counts = select(job.c.queue, job.c.status, func.count()).where(job.c.status.in_(statuses))
        oldest = (
            select(job.c.queue, func.min(job.c.run_at))
            .where(status_is(PENDING), job.c.run_at <= self.dialect.clock())
            .group_by(job.c.queue)
        )
        with self.db.read("stats") as conn:
            by_status = {(q, st): int(n) for q, st, n in conn.execute(counts.group_by(job.c.queue, job.c.status))}
            first_due = {q: first for q, first in conn.execute(oldest, self.dialect.clock_params(now))}
        return by_status, first_due

    def job_held_by(self) -> dict[str, int]:
        """Running jobs by lease owner (a worker holds one at a time, or a batch)."""
        stmt = select(job.c.lease_owner, func.min(job.c.id)).where(status_is(RUNNING)).group_by(job.c.lease_owner)
        with self.db.read("inspect") as conn:
            return {owner: int(job_id) for owner, job_id in conn.execute(stmt)}

    def job_finished_since(self, seconds: float, *, now: datetime | None = None) -> dict[str, int]:
        """Jobs per queue that succeeded in the last `seconds` (throughput)."""
        stmt = (
            select(job.c.queue, func.count())
            .where(status_is(SUCCEEDED), job.c.finished_at >= self.dialect.clock("since"))
            .group_by(job.c.queue)
        )
        with self.db.read("stats") as conn:
            return {
                queue: int(count) for queue, count in conn.execute(stmt, self.dialect.clock_params(now, since=-seconds))
            }

    def job_finished_ids(
        self,
        status: str,
        *,
        older_than: float | None = None,
        limit: int = _BATCH,
        now: datetime | None = None,
    ) -> list[int]:
        """Ids of jobs that finished in `status` (oldest first): all of them, or those that
        finished more than `older_than` seconds ago."""
        stmt = select(job.c.id).where(status_is(status)).order_by(job.c.finished_at).limit(limit)
        if older_than is not None:
            stmt = stmt.where(job.c.finished_at < self.dialect.clock("cutoff"))
        with self.db.read("inspect") as conn:
            return list(conn.execute(stmt, self.dialect.clock_params(now, cutoff=-(older_than or 0.0))).scalars())

    def job_delete(self, job_ids: Sequence[int], *, status: str, operation: str = "dead_letters") -> int:
        """Delete jobs (and their attempts) that are still in `status`; return how many."""
        if not job_ids:
            return 0
        with self.db.transaction(operation) as conn:
            gone = (
                conn.execute(delete(job).where(job.c.id.in_(job_ids), status_is(status)).returning(job.c.id))
                .scalars()
                .all()
            )
            if gone:
                conn.execute(delete(job_attempt).where(job_attempt.c.job_id.in_(gone)))
        return len(gone)


def _insert_params(new: NewJob, host_now: datetime) -> dict[str, Any]:
    run_at = new.run_at
    if run_at is None and new.delay:
        # A delay counts from the host clock; an immediate job takes the database clock.
        run_at = host_now + timedelta(seconds=new.delay)
    return {
        "name": new.name,
        "queue": new.queue,
        "payload": new.payload,
        "priority": new.priority,
        "p_run_at": run_at,
        "max_attempts": new.max_attempts,
        "timeout": new.timeout,
        "unique_key": new.unique_key,
        "actor": new.actor,
    }


def _job(row: Any, history: tuple[Attempt, ...]) -> Job:
    return Job(
        id=row.id,
        name=row.name,
        queue=row.queue,
        status=row.status,
        priority=row.priority,
        payload=decode_stored(row.payload),
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        run_at=row.run_at,
        last_error=row.last_error,
        actor=row.actor,
        unique_key=row.unique_key,
        timeout=row.timeout,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        finished_at=row.finished_at,
        result=decode_stored(row.result),
        history=history,
    )
