"""The lease sweep's transitions: leases that lapsed, or whose owner is known dead, are
closed (running -> pending | dead_lettered), and a live owner's orphaned leases released.
Each write is the core's `release` or `fail`, fenced as ever (`jobsup.store.transitions`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from jobsup.errors import LockBusy
from jobsup.store.rows import LEASE_EXPIRED, RELEASED, Held, Outcome, owner_runs_at_once

if TYPE_CHECKING:
    from jobsup.store.transitions import Transitions

LAPSED = "lease expired: the worker died or stopped renewing"


class Sweep:
    def __init__(self, t: Transitions) -> None:
        self.t = t

    # -- expire: running (lease lapsed or owner dead) -> pending | dead_lettered ------------------

    def expire(self, *, now: datetime | None = None, limit: int = 100) -> int:
        """The sweep: close leases that lapsed, of at most `limit` owners; returns how many.

        An owner that let its leases lapse is gone (a live worker ends itself before its
        lease can lapse). Of its leases, those it was running end `lease_expired` (retried,
        or dead-lettered if it was the last): for a worker that runs one job at a time, the
        first in the order of its latest claim; for one that runs N at once, every lease it
        held (up to N running; a success not yet written, or one of up to N jobs claimed
        ahead that had started or was about to, `jobsup.worker.ahead`: charged to be safe,
        so that a job that takes its host down is never the one released). The other leases
        of a worker of one job at a time were jobs waiting in a claimed batch, or successes
        not yet written; they never used an attempt and are released. Every write also requires
        the lease to have lapsed still. Owners the dialect knows are alive (SQLite, where the
        clock is the host's) are left alone."""
        clock = self.t.dialect.clock_params(now)
        with self.t.db.read("maintenance") as conn:
            owners = list(conn.execute(self.t.sql.lapsed_owners, {**clock, "p_limit": limit}).scalars())
        alive = self.t.dialect.owners_alive(self.t.db, set(owners))
        closed = 0
        for owner in owners:
            if owner in alive:
                continue
            with self.t.db.read("maintenance") as conn:
                held = conn.execute(self.t.sql.lapsed_of, {**clock, "p_owner": owner}).all()
            if not held:
                continue
            # The latest claims first; a stable sort keeps claim order within one claim, so
            # for a worker of one job at a time this is the first job of its latest claim.
            latest = sorted(held, key=lambda row: row.started_at, reverse=True)
            running = latest[:1] if owner_runs_at_once(owner) == 1 else latest
            # Release before charging: another sweep (or this one's next tick, if the release
            # fails) that reads in between then still sees the running jobs among the lapsed
            # ones, never a waiting job alone that it would take for a running one.
            charged = {row.id for row in running}
            rest = [Held.of_row(row) for row in held if row.id not in charged]
            try:
                closed += len(self.t.release(rest, now=now, expired_only=True, operation="maintenance"))
                for row in running:
                    outcome = Outcome(Held.of_row(row), LEASE_EXPIRED, LAPSED)
                    closed += self.t.fail(outcome, now=now, expired_only=True, operation="maintenance") is not None
            except LockBusy:
                continue  # a key held by a caller's open transaction: the next tick; the other owners now
        return closed

    def release_orphans(self, owner: str, known: Collection[int], *, operation: str = "claim") -> list[int]:
        """running -> pending for the leases a live owner holds but does not know of (its
        claim committed, the reply was lost): they never started. Returns their job ids.
        `operation` names it for fault injection: a claim's own clean-up by default."""
        with self.t.db.read(operation) as conn:
            held = [Held.of_row(row) for row in conn.execute(self.t.sql.held_by, {"p_owner": owner})]
        return sorted(self.t.release([h for h in held if h.id not in known], operation=operation))

    def expire_owner(self, owner: str, charged: Mapping[int, tuple[int, str, str]]) -> int:
        """Close every lease of an owner known dead (its supervisor reaped it). `charged`
        says how the attempts it was running end: job id -> (attempt, kind, error), where
        kind is `lease_expired`, `timed_out`, or `released` (a job that ignored shutdown);
        every other lease it held was a job that never started, or a success or release it
        had not written: released. Returns how many were closed."""
        with self.t.db.read("maintenance") as conn:
            held = [Held.of_row(row) for row in conn.execute(self.t.sql.held_by, {"p_owner": owner})]
        ends = {h.id: charged[h.id] for h in held if h.id in charged and charged[h.id][0] == h.lease.attempt}
        failing = [h for h in held if h.id in ends and ends[h.id][1] != RELEASED]
        closed = len(self.t.release([h for h in held if h not in failing], operation="maintenance"))
        for h in failing:
            _, kind, error = ends[h.id]
            closed += self.t.fail(Outcome(h, kind, error), operation="maintenance") is not None
        return closed
