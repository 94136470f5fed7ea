"""Circuit breakers per job type (`jobsup_breaker`, one row per type that has failed).

closed --N consecutive failed attempts--> open --reset passed (maintenance)--> half_open
half_open --its one probe succeeds--> closed;  --the probe fails--> open again.

- **The claim** carries one more part (`jobsup.store.claim`): ``(name NOT IN (SELECT name FROM jobsup_breaker WHERE
  state <> 'closed') OR id IN (SELECT probe_job_id FROM jobsup_breaker WHERE state =
  'half_open'))``. Neither subquery names a column of the job row, so the database runs
  each once per claim over the (small) breaker table, and a job type without a breaker row
  costs a hash probe. An open type's jobs stay pending, attempts untouched.
- **Exactly one probe**: when the reset has passed, maintenance moves the breaker to
  half_open and names the probe, the type's next pending job, by compare-and-set
  (`probe_job_id`). Only that job passes the claim, and a claim takes a row once, so one
  probe runs across every instance. A probe that ends otherwise (cancelled) is replaced on
  the next tick.
- **Counting** is an in-transaction step of complete, fail and expire (`steps.STEPS`), a
  selective one: a transition runs it when a job's type has a breaker
  (`Resolver.breaker_of`), so plain jobs of other types still settle in one statement.
  Failed and timed-out attempts count (a discard or a last attempt is one of them); a lease
  that expired counts when it dead-lettered the job. A success resets the count.
- **Announced** in the transaction that changes the row: `breaker.opened` (with the job
  whose failure opened it) and `breaker.closed` (by the probe's success, by maintenance
  for a probe whose settle did not close it, or by an operator's reset, with the actor).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, literal_column, or_, select, update

from jobsup.events import publishing
from jobsup.observe.events import emit
from jobsup.store.claim import status_is
from jobsup.store.database import after_commit
from jobsup.store.schema import BREAKER_STATES, DEAD_LETTERED, PENDING, SUCCEEDED, UNFINISHED_STATUSES, breaker, job

if TYPE_CHECKING:
    from jobsup.store.steps import Change

STATES = BREAKER_STATES  # the gauge's values, in order
CLOSED, HALF_OPEN, OPEN = STATES
SYSTEM = "jobsup"  # `changed_by` of the changes jobsup makes itself
FAILED_OUTCOMES = ("failed", "timed_out")


def _state(value: str) -> Any:
    return literal_column(f"'{value}'")


# -- the settle step ------------------------------------------------------------------------


def count_settles(conn: Connection, change: Change) -> None:
    t = change.context
    for row in change.rows:
        policy = t.resolver.breaker_of(row.name)
        if policy is None:
            continue
        if change.transition == "complete":
            _succeeded(conn, t, row.name, row.id, change.params)
        elif _counts_as_failure(change, row):
            _failed(conn, t, row.name, row.id, policy, change.params)


def _counts_as_failure(change: Change, row: Any) -> bool:
    if change.transition == "fail":
        return change.params.get("p_outcome") in FAILED_OUTCOMES
    return change.transition == "expire" and row.status == DEAD_LETTERED


def _clock_params(t: Any, params: Any, reset: float = 0.0) -> dict[str, Any]:
    # The transition's own instant (a fixed `now` in tests), with the reset as an offset.
    return dict(t.dialect.clock_params(params.get("p_now"), reset=reset))


def _succeeded(conn: Connection, t: Any, name: str, job_id: int, params: Any) -> None:
    # A success resets the count; in half_open only the probe's closes the breaker. No row
    # matches while nothing failed, so a healthy type's successes lock nothing. The probe's
    # close is its own statement (tried first: it matches only the probe), so a close is
    # told from a reset count and announced.
    clock = t.dialect.clock()
    probe = and_(breaker.c.state == _state(HALF_OPEN), breaker.c.probe_job_id == job_id)
    counted = and_(breaker.c.state == _state(CLOSED), breaker.c.failures > 0)
    values = {"failures": 0, "state": CLOSED, "probe_job_id": None, "changed_by": SYSTEM, "changed_at": clock}

    def reset(matches: Any) -> bool:
        stmt = update(breaker).where(breaker.c.name == name, matches).values(values).returning(breaker.c.name)
        return bool(t.dialect.returning(stmt).run(conn, _clock_params(t, params)))

    closed = reset(probe)
    if not closed and not reset(counted):
        return
    if closed:
        publishing.publish(conn, "breaker.closed", subject=f"breaker:{name}", name=name, probe_job=job_id)
    else:  # a closed breaker's failures counted so far: a success zeroes them
        after_commit(conn, lambda: emit("breaker.reset_by_success", name=name, job=job_id))


def _failed(conn: Connection, t: Any, name: str, job_id: int, policy: Any, params: Any) -> None:
    clock_params = _clock_params(t, params, policy.reset)
    clock = t.dialect.clock()
    if conn.execute(select(breaker.c.state).where(breaker.c.name == name)).first() is None:
        first = {"name": name, "state": CLOSED, "failures": 0, "changed_by": SYSTEM, "changed_at": clock}
        t.dialect.insert_missing(conn, breaker, first, clock_params)
    # Count first: the UPDATE locks the row, so two failures settling at once are counted one
    # after the other, and the one that reaches the threshold sees it.
    count = (
        update(breaker)
        .where(breaker.c.name == name, breaker.c.state == _state(CLOSED))
        .values(failures=breaker.c.failures + 1)
        .returning(breaker.c.failures)
    )
    counts = t.dialect.returning(count).run(conn, {})
    counted = counts[0].failures if counts else None
    opens = and_(breaker.c.state == _state(HALF_OPEN), breaker.c.probe_job_id == job_id)
    if counted is not None and counted >= policy.failures:
        opens = or_(opens, and_(breaker.c.state == _state(CLOSED), breaker.c.failures >= policy.failures))
    opens_now = (
        update(breaker)
        .where(breaker.c.name == name, opens)
        .values(
            state=OPEN,
            opened_at=clock,
            reopen_at=t.dialect.clock("reset"),
            probe_job_id=None,
            changed_by=SYSTEM,
            changed_at=clock,
        )
        .returning(breaker.c.name)
    )
    opened = t.dialect.returning(opens_now).run(conn, clock_params)
    if opened:
        publishing.publish(
            conn, "breaker.opened", subject=f"breaker:{name}", name=name, failed_job=job_id, reset=policy.reset
        )


# -- maintenance and operators -------------------------------------------------------------


class Breakers:
    """The breaker rows of one database: listing, maintenance's half-opening, an
    operator's reset."""

    def __init__(self, db: Any, audit: Any, resolver: Any) -> None:
        self.db, self.dialect, self.audit, self.resolver = db, db.dialect, audit, resolver

    def rows(self) -> list[dict[str, Any]]:
        with self.db.read("breakers") as conn:
            rows = conn.execute(select(breaker).order_by(breaker.c.name)).all()
        return [dict(row._mapping) for row in rows]

    def states(self) -> dict[str, str]:
        return {row["name"]: row["state"] for row in self.rows()}

    def half_open(self, *, now: datetime | None = None) -> list[str]:
        """Open breakers whose reset has passed become half_open; every half_open breaker
        without a live probe gets one (its type's next pending job). Returns the names
        changed."""
        clock, params = self.dialect.clock(), self.dialect.clock_params(now)
        changed: list[str] = []
        with self.db.transaction("breakers") as conn:
            due = and_(breaker.c.state == _state(OPEN), breaker.c.reopen_at <= clock)
            stmt = (
                update(breaker)
                .where(due)
                .values(state=HALF_OPEN, probe_job_id=None, changed_by=SYSTEM, changed_at=clock)
            )
            changed += [row.name for row in self.dialect.returning(stmt.returning(breaker.c.name)).run(conn, params)]
            waiting = conn.execute(
                select(breaker.c.name, breaker.c.probe_job_id).where(breaker.c.state == _state(HALF_OPEN))
            ).all()
            for name, probe in waiting:
                status = None if probe is None else self._status(conn, probe)
                if status in UNFINISHED_STATUSES:
                    continue
                if status == SUCCEEDED and self._close_after(conn, name, probe, params):
                    changed.append(name)  # its settle did not close it (that process knew no policy)
                    continue
                chosen = self._next_pending(conn, name, params)
                if chosen is None or chosen == probe:
                    continue
                cas = update(breaker).where(
                    breaker.c.name == name,
                    breaker.c.state == _state(HALF_OPEN),
                    breaker.c.probe_job_id.is_(None) if probe is None else breaker.c.probe_job_id == probe,
                )
                if conn.execute(cas.values(probe_job_id=chosen)).rowcount:
                    changed.append(name)
        changed = list(dict.fromkeys(changed))
        for name in changed:
            emit("breaker.half_open", name=name)
        return changed

    def _status(self, conn: Connection, job_id: int) -> str | None:
        return conn.execute(select(job.c.status).where(job.c.id == job_id)).scalar()

    def _close_after(self, conn: Connection, name: str, probe: int, params: Any) -> bool:
        cas = update(breaker).where(
            breaker.c.name == name, breaker.c.state == _state(HALF_OPEN), breaker.c.probe_job_id == probe
        )
        values = {"state": CLOSED, "failures": 0, "probe_job_id": None, "changed_by": SYSTEM}
        closed = bool(conn.execute(cas.values(**values, changed_at=self.dialect.clock()), params).rowcount)
        if closed:
            publishing.publish(conn, "breaker.closed", subject=f"breaker:{name}", name=name, probe_job=probe)
        return closed

    def _next_pending(self, conn: Connection, name: str, params: Any) -> int | None:
        # The type's next due job in claim order, in whichever queue it was enqueued (a
        # job not due yet would hold the whole type back until it is).
        where = [status_is(PENDING), job.c.name == name, job.c.run_at <= self.dialect.clock()]
        order = (job.c.priority.desc(), job.c.run_at, job.c.id)
        return conn.execute(select(job.c.id).where(*where).order_by(*order).limit(1), params).scalar()

    def reset(self, name: str, *, actor: str, now: datetime | None = None) -> bool:
        """Close `name`'s breaker at once (count zeroed), audited `breaker.reset`; False if
        it was closed with no failures counted (or had no row)."""
        clock = self.dialect.clock()
        stmt = (
            update(breaker)
            .where(breaker.c.name == name, or_(breaker.c.state != _state(CLOSED), breaker.c.failures > 0))
            .values(state=CLOSED, failures=0, probe_job_id=None, changed_by=actor, changed_at=clock)
        )
        with self.db.transaction("breakers") as conn:
            was = conn.execute(select(breaker.c.state, breaker.c.failures).where(breaker.c.name == name)).first()
            done = bool(conn.execute(stmt, self.dialect.clock_params(now)).rowcount)
            detail = {"was": None if was is None else {"state": was.state, "failures": was.failures}}
            outcome = "ok" if done else "not_found" if was is None else "unchanged"
            self.audit.record(
                actor, "breaker.reset", target=name, outcome=outcome, detail=detail, connection=conn, now=now
            )
            if done and was is not None and was.state != CLOSED:
                publishing.publish(
                    conn, "breaker.closed", subject=f"breaker:{name}", name=name, actor=actor, was=was.state
                )
        if done and (was is None or was.state == CLOSED):  # a reset of a closed one only zeroes its count
            emit("breaker.reset", name=name, actor=actor)
        return done
