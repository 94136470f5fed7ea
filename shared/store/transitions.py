"""The named transitions of the job state machine (DESIGN section 4), the only writers of
`jobsup_job`.

One method per arrow: enqueue, claim, complete, fail, release, cancel, expire, retry, fire
(and renew, which extends a lease and changes no state). Each is one transaction and a
compare-and-set: the statement names the state it expects and the rows it returns say
whether it happened. Inside the transaction, after the compare-and-set has matched, run the
in-transaction steps `jobsup.store.steps.STEPS` lists for it; after the commit, the events
(`jobsup.observe.events`), never before the write they announce. Every time-dependent
transition takes an optional `now`; without it the reference clock is used.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row
from sqlalchemy.exc import IntegrityError

from jobsup.calendars import Calendar
from jobsup.errors import DuplicateJob
from jobsup.events import publishing
from jobsup.jobtypes import Resolver
from jobsup.observe.events import emit
from jobsup.observe.logs import id_ranges
from jobsup.store import concurrency_keys, firing, operators, steps
from jobsup.store.batches import Batches
from jobsup.store.chain import Chain, Returning
from jobsup.store.claim import Claimed, claim_params, claim_rounds
from jobsup.store.database import Database
from jobsup.store.insert import row_params
from jobsup.store.recurring import RecurringStore
from jobsup.store.rows import (
    DISCARDED,
    LEASE_EXPIRED,
    RELEASED,
    SUCCEEDED,
    Held,
    Lease,
    NewJob,
    Outcome,
    RecurringSchedule,
    Renewed,
)
from jobsup.store.schema import CANCELLED, DEAD_LETTERED
from jobsup.store.sealed import seal_new
from jobsup.store.statements import Statements
from jobsup.store.sweep import Sweep
from jobsup.store.workflows import Workflows


class Transitions:
    """The state machine's writes on one database."""

    def __init__(self, db: Database, resolver: Resolver, *, key_wait: float | None = None) -> None:
        self.db, self.dialect, self.resolver, self.key_wait = db, db.dialect, resolver, key_wait  # `Store`
        self.sql = Statements.of(db.dialect)
        self.workflows, self.batches, self.sweep = Workflows(self), Batches(self), Sweep(self)

    # -- enqueue: (nothing) -> pending -------------------------------------------------------

    def enqueue(
        self,
        jobs: Sequence[NewJob],
        *,
        connection: Connection | None = None,
        now: datetime | None = None,
        inserted: list[int] | None = None,
    ) -> list[int]:
        """Insert `jobs`; return their ids in order. A job whose unique key belongs to a live
        job is not inserted: the live job's id is returned in its place (`inserted`, if
        given, gets the positions of those that were). With `connection` the jobs are
        written in the caller's transaction and announced when it commits."""
        clock = self.dialect.clock_params(now)
        if connection is not None:
            with self.db.errors():
                ids, positions = self.insert(connection, jobs, clock)
            publishing.emit_enqueued(jobs, ids, positions, connection)
        else:
            # No unique key, secret or enqueue step: one atomic insert where the dialect has
            # one (PostgreSQL: a single round trip in autocommit), else a transaction.
            alone = len(jobs) <= self.dialect.atomic_insert_rows and not steps.of("enqueue")
            alone = alone and not any(new.writes_twice for new in jobs)
            one = alone and len(jobs) == 1 and self.db.may_run_on_driver()  # the call applications make most
            if one and (driver := self.dialect.insert_one_driver(jobs[0], clock)) is not None:
                ids, positions = [int(self.db.driver_value("enqueue", *driver))], [0]
            else:
                with (self.db.statement if alone else self.db.transaction)("enqueue") as conn:
                    ids, positions = self.insert(conn, jobs, clock)
            publishing.emit_enqueued(jobs, ids, positions)
        if inserted is not None:
            inserted.extend(positions)
        return ids

    def insert(self, conn: Connection, jobs: Sequence[NewJob], clock: Mapping[str, Any]) -> tuple[list[int], list[int]]:
        """Insert `jobs` on `conn`, in its transaction, at `clock` (`Dialect.clock_params`);
        their ids, and the positions of those inserted (a live unique key's job is not).
        For the in-transaction steps that enqueue follow-ups, and for `enqueue`."""
        clock = dict(clock)
        keyed = [i for i, new in enumerate(jobs) if new.unique_key is not None]
        inserted = [i for i, new in enumerate(jobs) if new.unique_key is None] if keyed else list(range(len(jobs)))
        ids, woken = [0] * len(jobs), set[str]()
        if inserted:
            found, woken = self.dialect.insert_jobs(conn, [jobs[i] for i in inserted] if keyed else jobs, clock)
            for i, job_id in zip(inserted, found, strict=True):
                ids[i] = job_id
        for i in keyed:
            ids[i], is_new = self._insert_unique(conn, row_params(jobs[i], clock), str(jobs[i].unique_key))
            if is_new:
                inserted.append(i)
        if inserted:
            new = [(ids[i], jobs[i]) for i in inserted]
            seal_new(conn, self.sql, new)
            concurrency_keys.admit_new(conn, self.sql, new)
            if steps.of("enqueue"):
                steps.run(conn, steps.Change("enqueue", new, clock, self))
            self.dialect.after_enqueue(conn, {jobs[i].queue for i in inserted} - woken)
        return ids, inserted

    def _insert_unique(self, conn: Connection, params: dict[str, Any], key: str) -> tuple[int, bool]:
        # The filtered unique index decides, so this holds across processes. The insert
        # runs in a savepoint so that losing the race does not abort the caller's transaction.
        for _ in range(5):
            try:
                with conn.begin_nested():
                    return int(conn.execute(self.sql.insert, params).scalar_one()), True
            except IntegrityError:
                existing = conn.execute(self.sql.live_with_key, {"p_key": key}).scalar()
                if existing is not None:
                    return int(existing), False
                # The live job finished between our insert and our look: insert again.
        raise DuplicateJob(f"unique key {key!r} is contended; try again")

    # -- claim: pending -> running -------------------------------------------------------------

    def claim(self, queue: str, owner: str, *, limit: int = 1, lease: float, now: datetime | None = None) -> Claimed:
        """Claim up to `limit` due jobs of `queue` for `owner`, each for `lease` seconds, in
        the order they should run."""
        began = time.monotonic()  # before the clock is read: SQLite binds it here, not when it writes
        params = claim_params(self.dialect, queue=queue, owner=owner, limit=limit, lease=lease, now=now)
        run = steps.of("claim", needs_steps=self.resolver.rate_limited(queue))
        dropped: dict[int, datetime] = {}

        def after(conn: Connection, rows: Sequence[Row[Any]]) -> Sequence[Row[Any]]:
            change = steps.Change("claim", rows, {**params, "given_now": now}, self)
            for step in run:
                step(conn, change)
            dropped.update(change.dropped)
            return [row for row in rows if row.id not in change.dropped] if change.dropped else rows

        return claim_rounds(lambda p: self.dialect.claim(self.db, p, after if run else None), params, dropped, began)

    def renew(self, leases: Sequence[Lease], *, lease: float, now: datetime | None = None) -> Renewed:
        """Extend the leases still held; return the ids renewed (missing ones were lost),
        with those an operator asked to cancel. Changes no state."""
        if not leases:
            return Renewed()
        params = {**self.dialect.clock_params(now, lease=lease), **self.sql.fence_params(leases)}
        renew = self.sql.renew
        with (self.db.statement if renew.single else self.db.transaction)("renew") as conn:
            rows = renew.run(conn, params)
        return Renewed((row.id for row in rows), (row.id for row in rows if row.cancel_requested_at is not None))

    # -- settle: running -> succeeded | pending | dead_lettered -----------------------------------

    def complete(self, outcomes: Sequence[Outcome], *, now: datetime | None = None) -> set[int]:
        """running -> succeeded, storing each result; one transaction. One statement on
        PostgreSQL (a result per row); elsewhere one per distinct result (most often none).
        Returns the ids settled (a stale lease settles nothing)."""
        groups, needs_steps = self.complete_params(outcomes, now)
        rows = self._run_each("complete", self.sql.complete, groups, "settle", needs_steps) if groups else []
        return self.completed(outcomes, {row[0] for row in rows})

    def send_complete(self, outcomes: Sequence[Outcome]) -> Callable[[float | None], set[int]] | None:
        """`complete`, sent now (`Chain.send_alone`); the call returned reads its reply (by a
        deadline, if given: `Sent.rows`) and returns what `complete` does, raising as it would
        (and then whether it committed is unknown). None where it cannot be sent so: several
        statements, steps, or a database or connection that cannot (`jobsup.store.dialects.sent`)."""
        groups, needs_steps = self.complete_params(outcomes)
        if len(groups) != 1 or steps.of("complete", needs_steps=needs_steps):
            return None
        sent = self.sql.complete.send_alone(self.db, groups[0], "settle")
        if sent is None:
            return None
        return lambda deadline: self.completed(outcomes, {row[0] for row in sent.rows(deadline)}, behind=True)

    def complete_params(
        self, outcomes: Sequence[Outcome], now: datetime | None = None
    ) -> tuple[list[dict[str, Any]], bool]:
        """`complete`'s parameter sets (one a statement), and whether it needs the selective steps."""
        same = {"p_outcome": SUCCEEDED, "p_error": None, **self.dialect.clock_params(now)}
        if self.sql.results_per_row:
            leases, results = [o.held.lease for o in outcomes], [o.result for o in outcomes]
            groups = [{**same, **self.sql.fence_params(leases, results)}] if outcomes else []
        else:
            by_result: dict[str | None, list[Outcome]] = defaultdict(list)
            for outcome in outcomes:
                by_result[outcome.result].append(outcome)
            groups = [
                {**same, **self.sql.fence_params([o.held.lease for o in group]), "p_result": result}
                for result, group in by_result.items()
            ]
        return groups, self._has_steps(*(outcome.held for outcome in outcomes))

    def completed(self, outcomes: Sequence[Outcome], settled: set[int], *, behind: bool = False) -> set[int]:
        """Announce `complete`'s write: `settled`, the ids it settled, of `outcomes`'
        (`behind`: sent behind a claim, `send_complete`; said on the event's line)."""
        done = []
        for outcome in outcomes:
            held = outcome.held
            if held.id in settled:
                done.append((held.id, held.name, held.lease.attempt, held.queue, outcome.seconds))
            else:
                emit("job.settle_stale", **_fields(held, outcome), outcome=SUCCEEDED)
        if done:
            # One event for the settle, its jobs in `each` (`catalogue.EACH`): the metrics
            # count them, and the log has a line per job at DEBUG.
            emit(
                "jobs.succeeded",
                count=len(done),
                ids=id_ranges(settled),
                names=",".join(sorted({name for _, name, _, _, _ in done})),
                queue=",".join(sorted({queue for _, _, _, queue, _ in done})),
                worker=outcomes[0].worker,
                seconds=round(sum(seconds or 0.0 for *_, seconds in done), 6),
                behind=True if behind else None,  # None: not on the line
                each=done,
            )
        return settled

    def fail(
        self,
        outcome: Outcome,
        *,
        now: datetime | None = None,
        expired_only: bool = False,
        operation: str = "settle",
    ) -> str | None:
        """End an attempt that did not succeed (`failed`, `discarded`, `timed_out`,
        `lease_expired`). The job goes back to pending after its retry delay, or is
        dead-lettered when it has no attempts left or was discarded. `expired_only` also
        requires the lease to have lapsed (the sweep's compare-and-set). Returns the new
        status, or None when the lease was no longer held (nothing changed)."""
        held = outcome.held
        delay = outcome.retry_in
        if delay is None:
            delay = self.resolver.retry_in(held.name, held.lease.attempt, job=held.id)
        params = {
            **self.dialect.clock_params(now, retry=delay),
            **self.sql.fence_params([held.lease]),
            "p_discard": outcome.kind == DISCARDED,
            "p_error": outcome.error,
            "p_traceback": outcome.traceback,
            "p_outcome": "failed" if outcome.kind == DISCARDED else outcome.kind,
        }
        chain = self.sql.fail_expired if expired_only else self.sql.fail
        transition = "expire" if outcome.kind == LEASE_EXPIRED else "fail"
        params[publishing.HOOKS_EXCEPTION] = outcome.exc  # bound to no statement: for in-process hooks
        rows = self._run(transition, chain, params, operation, self._has_steps(held))
        status = str(rows[0].status) if rows else None
        kind = "failed" if outcome.kind == DISCARDED else outcome.kind
        fields = {**_fields(held, outcome), "outcome": kind, "error": outcome.error}
        if status is None:
            emit("job.settle_stale", **fields)
        elif status == CANCELLED:  # an operator asked while it ran: this end is the cancel's
            emit("job.cancelled", **fields)
        elif outcome.kind == LEASE_EXPIRED:
            emit("lease.expired", **fields, status=status)
        elif status == DEAD_LETTERED:
            emit("job.dead_lettered", **fields, exception=outcome.exc)
        else:
            emit("job.failed", **fields, retry_in=round(delay, 3))
        return status

    def _has_steps(self, *held: Held) -> bool:
        """One's end sets off steps, or its type's breaker counts its settles (`jobsup.store.breakers`)."""
        names = {one.name for one in held}  # a type's breaker looked up once: most settles are of one type
        return any(one.needs_steps for one in held) or any(self.resolver.breaker_of(n) is not None for n in names)

    def release(
        self,
        held: Sequence[Held],
        *,
        now: datetime | None = None,
        expired_only: bool = False,
        operation: str = "release",
    ) -> set[int]:
        """running -> pending without using up the attempt (shutdown, or a claimed job that
        never started), or -> cancelled for a job an operator asked to cancel meanwhile;
        returns the ids released. `expired_only` also requires the lease to have lapsed (the
        sweep's compare-and-set)."""
        released: set[int] = set()
        cancelled: set[int] = set()
        for owner in {h.lease.owner for h in held}:
            mine = [h for h in held if h.lease.owner == owner]
            params = {**self.dialect.clock_params(now), **self.sql.fence_params([h.lease for h in mine])}
            params |= {"p_outcome": RELEASED, "p_error": None}
            chain = self.sql.release_expired if expired_only else self.sql.release
            needs_steps = any(h.needs_steps for h in mine)
            rows = self._run("release", chain, params, operation, needs_steps)
            released |= {row[0] for row in rows}
            cancelled |= {row[0] for row in rows if row.status == CANCELLED}
        for h in held:
            if h.id in cancelled:  # an operator asked while it was held: released, it ends
                emit("job.cancelled", **_fields(h))
            else:
                emit("job.released", **_fields(h), stale=h.id not in released)
        return released

    # -- operators ---------------------------------------------------------------------------------

    def cancel(self, job_id: int, *, now: datetime | None = None) -> bool:
        """waiting or pending -> cancelled; a running job is asked to stop: its worker sees
        the request at its next renewal and sets the job's cancel event, and the attempt's
        end, when it is written, ends the job `cancelled` (unless the function had already
        succeeded). Until then the job holds all it held. False when the job had finished."""
        return bool(self.cancel_where(self.sql.cancel, {"p_job": job_id}, now))

    def cancel_where(
        self,
        chain: Returning,
        which: Mapping[str, Any],
        now: datetime | None,
        also: Callable[[Connection, dict[str, Any]], object] | None = None,
    ) -> Sequence[Row[Any]]:
        """Cancel what `chain` matches, and do `also` in the same transaction
        (`operators.cancel_where`)."""
        return operators.cancel_where(self, chain, which, now, also)

    def retry(self, job_ids: Sequence[int], *, now: datetime | None = None) -> list[int]:
        """dead_lettered -> pending, with the job's own budget of attempts again on top of
        those it used (`operators.retry`)."""
        return operators.retry(self, job_ids, now=now)

    # -- fire: a recurring schedule's slot -> a pending job -----------------------------------------

    def fire(
        self,
        recurring: RecurringStore,
        schedule: RecurringSchedule,
        *,
        now: datetime | None = None,
        calendar: Calendar | None = None,
    ) -> str:
        """Fire the schedule's latest due slot once: `firing`'s FIRED, ALREADY_FIRED or SKIPPED
        (its overlap or calendar said so: counted on the schedule). The schedule moves on by
        compare-and-set on its next run, and the job carries (schedule, slot) under a unique
        index, so no slot fires twice however many instances try. `calendar`: the schedule's.
        A bad cron, time zone or missing calendar raises `BadInput` (the caller logs it and moves on)."""
        return firing.fire(self, recurring, schedule, now=now, calendar=calendar)

    # -- the unit of every transition ------------------------------------------------------------

    def _run(
        self, transition: str, chain: Chain, params: Mapping[str, Any], operation: str, needs_steps: bool = True
    ) -> Sequence[Row[Any]]:
        return self._run_each(transition, chain, [params], operation, needs_steps)

    def _run_each(
        self,
        transition: str,
        chain: Chain,
        each: Sequence[Mapping[str, Any]],
        operation: str,
        needs_steps: bool = True,
    ) -> Sequence[Row[Any]]:
        """Run a compare-and-set once per parameter set, each with its in-transaction steps,
        as one unit. `needs_steps`: some of the jobs need the selective steps (`steps.STEPS`:
        `Held.needs_steps`, and types with a breaker), so those run too. One set
        and no step to run: the chain runs alone (`Chain.run_alone`; PostgreSQL: one round trip,
        whose rows have the id and the status only: read nothing else from them)."""
        if len(each) == 1 and not steps.of(transition, needs_steps=needs_steps):
            return chain.run_alone(self.db, each[0], operation)
        matched: list[Row[Any]] = []
        with self.db.transaction(operation) as conn:
            for params in each:
                matched.extend(chain.run(conn, params))
            # Once, after every compare-and-set: a step's locks come after all the rows'.
            if matched:
                steps.run(conn, steps.Change(transition, matched, each[0], self), needs_steps=needs_steps)
        return matched


def _fields(held: Held, outcome: Outcome | None = None) -> dict[str, Any]:
    """What every job event names: the job, its attempt, queue and worker, and its run time."""
    fields: dict[str, Any] = {"job": held.id, "name": held.name, "attempt": held.lease.attempt, "queue": held.queue}
    if outcome is not None:
        fields["worker"] = outcome.worker
        fields["seconds"] = None if outcome.seconds is None else round(outcome.seconds, 6)
    return fields
