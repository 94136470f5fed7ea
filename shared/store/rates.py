"""Rate windows: at most a key's `limit` jobs start in any window of `per` seconds, on every
instance (`jobsup.policies.Rate`).

The window is exact on the starts themselves: its key's last `limit` start times are kept in
`jobsup_rate_start`, and a claimed job starts only if fewer than `limit` of them lie in the
`per` seconds before now. The check runs in the claim's transaction, under the lock of the
key's `jobsup_rate_limit` row, so the claims of one key take turns across every instance.

A claimed job the window has no room for goes back in the same transaction, never seen
running: pending, its attempt not counted, due at the start time the window gives it (its
`rate_turn`). Those times are handed out in order from the key's `frontier`, one every
per/limit seconds, and a job claimed while earlier ones wait for their turn goes behind
them: a backlog of 10,000 jobs is put back once each and then drains at the full rate,
instead of being claimed and put back again at every claim. A job whose turn has come
starts if the window has room (it may not, when the workers ran late and turns bunched up;
it then gets the next time with room).

Why not a token bucket: a full bucket lets `limit` start at once and refills while they
run, so twice the limit can start inside one period. Why not in the claim statement: only
rate-limited job types pay for it here (`Resolver.rate_limited`), and a claim of none of them
stays one statement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, insert, select, update

from jobsup.policies import Rate
from jobsup.store.dialects import Dialect
from jobsup.store.schema import rate_limit, rate_start

if TYPE_CHECKING:
    from jobsup.store.steps import Change

_locked = (
    select(rate_limit.c.frontier)
    .where(rate_limit.c.key == bindparam("p_key"))
    .with_for_update()
    .with_hint(rate_limit, "WITH (UPDLOCK, ROWLOCK)", dialect_name="mssql")
)
_starts = select(rate_start.c.slot, rate_start.c.started_at).where(rate_start.c.key == bindparam("p_key"))
_restart = (
    update(rate_start)
    .where(rate_start.c.key == bindparam("p_key"), rate_start.c.slot == bindparam("p_slot"))
    .values(started_at=bindparam("p_at"))
)
_new_start = insert(rate_start).values(key=bindparam("p_key"), slot=bindparam("p_slot"), started_at=bindparam("p_at"))
_set_frontier = (
    update(rate_limit).where(rate_limit.c.key == bindparam("p_key")).values(frontier=bindparam("p_frontier"))
)


@dataclass
class Window:
    """One key's window as read under its lock, and the starts decided since."""

    key: str
    policy: Rate
    frontier: datetime | None
    slots: dict[int, datetime]
    writes: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)
    handed: bool = False  # whether this claim has given a job a later turn
    read_frontier: datetime | None = None  # as read under the lock: written back only if changed

    @classmethod
    def locked(cls, conn: Connection, dialect: Dialect, key: str, policy: Rate) -> Window:
        params = {"p_key": key}
        found = conn.execute(_locked, params).first()
        if found is None:  # the key's first claim: its row (or the one another claim made first), locked now
            dialect.insert_missing(conn, rate_limit, {"key": key, "frontier": None})
            found = conn.execute(_locked, params).one()
        slots = {int(slot): started for slot, started in conn.execute(_starts, params).all()}
        return cls(key, policy, found.frontier, slots, read_frontier=found.frontier)

    def room_at(self) -> datetime | None:
        """When the window next has room for a start (None: it has room now, whatever now is)."""
        if len(self.slots) < self.policy.limit:
            return None
        latest = sorted(self.slots.values(), reverse=True)
        return latest[self.policy.limit - 1] + timedelta(seconds=self.policy.per)

    def place(self, now: datetime, turn: datetime | None) -> datetime | None:
        """Start a claimed job now (None) or give it a later start time. `turn` is the time
        the window gave it before, if it was put back."""
        waited = turn is not None and turn <= now
        queued = self.frontier is not None and self.frontier > now and not waited
        room = self.room_at()
        if not queued and (room is None or room <= now):
            self._start(now)
            return None
        # Behind the key's queue, and behind the turn just given in this claim: jobs whose
        # turns bunched up (late workers) are spread again rather than all given `room`.
        behind = self._behind() if queued or self.handed else None
        later = max(t for t in (room, now, behind) if t is not None)
        self.frontier = later if self.frontier is None else max(self.frontier, later)
        self.handed = True
        return later

    def _behind(self) -> datetime:
        assert self.frontier is not None
        return self.frontier + timedelta(seconds=self.policy.spacing)

    def _start(self, now: datetime) -> None:
        params = {"p_key": self.key, "p_at": now}
        if len(self.slots) < self.policy.limit:
            slot = max(self.slots, default=-1) + 1
            self.writes.append((_new_start, {**params, "p_slot": slot}))
        else:
            slot = min(self.slots, key=lambda each: (self.slots[each], each))
            self.writes.append((_restart, {**params, "p_slot": slot}))
        self.slots[slot] = now

    def save(self, conn: Connection) -> None:
        for statement, params in self.writes:
            conn.execute(statement, params)
        if self.frontier != self.read_frontier:
            conn.execute(_set_frontier, {"p_key": self.key, "p_frontier": self.frontier})


def admit_claimed(conn: Connection, change: Change) -> None:
    """The claim's step: start the claimed jobs of rate-limited types their windows have room
    for, and put the others back (their ids go to `change.dropped`)."""
    t = change.context
    limited: dict[str, tuple[Rate, list[Any]]] = {}
    for row in change.rows:
        policy = t.resolver.rate_of(row.name)
        if policy is not None:
            key = policy.key_for(row.name)
            limited.setdefault(key, (t.resolver.key_rate(key) or policy, []))[1].append(row)
    if not limited:
        return
    ids = [row.id for _, rows in limited.values() for row in rows]
    turns = {job_id: turn for job_id, turn in conn.execute(t.sql.rate_turns, {"p_ids": ids}).all()}
    given = change.params.get("given_now")  # a test's fixed instant
    for key in sorted(limited):  # keys locked in one order: two claims never wait on each other
        policy, rows = limited[key]
        window = Window.locked(conn, t.dialect, key, policy)
        # The start is now, after the wait for the key's lock: the claim's own clock was read
        # before it (and before SQLite's write lock), and a start counted earlier than it
        # happened would let more than the limit start in a window.
        now = given or t.dialect.instant(conn)
        for row in rows:
            later = window.place(now, turns.get(row.id))
            if later is None:
                conn.execute(t.sql.restart_claimed_attempt, {"p_job": row.id, "p_at": now})
                continue
            # Its attempt never ran: it leaves no row (one is written when an attempt ends).
            conn.execute(t.sql.put_back_for_rate, {"p_job": row.id, "p_owner": row.lease_owner, "p_turn": later})
            change.dropped[row.id] = later
        window.save(conn)
