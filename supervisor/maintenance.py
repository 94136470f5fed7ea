"""The maintenance tick: small steps, each `run_once(now)`, safe on every instance at once
(every write is a compare-and-set). One step's failure is logged and counted and does not
stop the others."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import NamedTuple, Protocol

from jobsup.clock import host_clock
from jobsup.errors import LockBusy
from jobsup.observe import metrics
from jobsup.observe.events import emit
from jobsup.store import concurrency_keys
from jobsup.store.outbox import Outbox
from jobsup.store.processes import stale_age
from jobsup.store.schema import DEAD_LETTERED, PENDING, RUNNING, WAITING
from jobsup.store.states import RETRYING, SCHEDULED
from jobsup.store.store import Store
from jobsup.supervisor.guard import report_errors


class Step(Protocol):
    name: str

    def run_once(self, now: datetime | None = None) -> int: ...


class ExpireLeases:
    """Close leases that lapsed: the attempt ends `lease_expired`, the job retries or is
    dead-lettered when that was its last attempt (see `Transitions.expire`)."""

    name = "expire_leases"

    def __init__(self, store: Store) -> None:
        self.store = store

    def run_once(self, now: datetime | None = None) -> int:
        return self.store.transitions.sweep.expire(now=now)


class HalfOpenBreakers:
    """open -> half_open once the reset has passed, with one probe named; and the
    `jobsup_breaker_state` gauge of every breaker."""

    name = "breakers"

    def __init__(self, store: Store) -> None:
        self.store = store

    def run_once(self, now: datetime | None = None) -> int:
        changed = self.store.breakers.half_open(now=now)
        metrics.set_breaker_states(self.store.breakers.states())
        return len(changed)


class MarkSlaBreaches:
    """Mark the jobs past an SLA deadline, each once (`jobsup.store.sla`)."""

    name = "sla"

    def __init__(self, store: Store, batch: int = 500, max_batches: int = 10) -> None:
        self.store, self.batch, self.max_batches = store, batch, max_batches

    def run_once(self, now: datetime | None = None) -> int:
        return self.store.sla.mark(now=now, batch=self.batch, max_batches=self.max_batches)


class PruneProcesses:
    """Delete process rows of instances that stopped heartbeating."""

    name = "prune_processes"

    def __init__(self, store: Store, heartbeat_interval: float) -> None:
        self.store = store
        self.stale_after = stale_age(heartbeat_interval)

    def run_once(self, now: datetime | None = None) -> int:
        pruned = self.store.processes.process_prune(self.stale_after, now=now)
        if pruned:
            emit("processes.pruned", count=len(pruned))
        return len(pruned)


MAX_QUEUE_LABELS = 100  # queues seen besides the served ones that get a label of their own
OTHER_QUEUE = "_other"


class QueueGauges:
    """Refresh the queue depth, oldest-pending-age and paused gauges of every queue this
    instance serves or has seen, zeros included, so a queue that drains (or is resumed)
    reads 0 instead of its last values.

    The label values are bounded: the served queues, and the first `others` queues seen
    besides; any queue after those is counted under `_other`. A series once written stays in
    the metrics files for the process's life, so admitting every queue name ever enqueued
    (an API caller's, or names made from input) would grow the scrape without end."""

    name = "queue_gauges"
    # The statuses, and the states of `jobsup.store.states` (retrying and scheduled are parts
    # of pending; waiting is held by a concurrency key), as `jobsup stats` counts them.
    STATUSES = (PENDING, RUNNING, DEAD_LETTERED, WAITING, RETRYING, SCHEDULED)

    def __init__(self, store: Store, served: Iterable[str], others: int = MAX_QUEUE_LABELS) -> None:
        self.store = store
        self.seen = set(served)  # the label values given so far
        self.most = len(self.seen) + others
        self.overflowed = False

    def label(self, queue: str) -> str:
        if queue not in self.seen and len(self.seen) < self.most:
            self.seen.add(queue)
        if queue in self.seen:
            return queue
        self.overflowed = True
        return OTHER_QUEUE

    def run_once(self, now: datetime | None = None) -> int:
        # Each count through its index (a scan of every row retention keeps, each tick, is not).
        counts = {**self.store.overview.queue_counts(), **self.store.overview.state_counts(now=now)}
        first_due = self.store.overview.oldest_due(now=now)
        states = self.store.pauses.states()
        # In name order, so which queues get a label of their own does not depend on the tick.
        for queue in sorted({queue for queue, _ in counts} | set(first_due) | set(states)):
            self.label(queue)
        labels = self.seen | ({OTHER_QUEUE} if self.overflowed else set())
        depths = {(label, status): 0 for label in labels for status in self.STATUSES}
        for (queue, status), count in counts.items():
            depths[(self.label(queue), status)] += count
        at = now or host_clock()
        oldest = {label: 0.0 for label in labels}
        for queue, first in first_due.items():
            label = self.label(queue)
            oldest[label] = max(oldest[label], (at - first).total_seconds())
        paused = {label: False for label in labels}
        for queue, state in states.items():
            paused[self.label(queue)] |= bool(state.paused)
        metrics.set_queue_depths(depths, oldest)
        metrics.set_queues_paused(paused)
        return len(labels)


class OutboxGauges:
    """Refresh the outbox's depth, oldest-event age and parked count (only where a publisher is configured)."""

    name = "outbox_gauges"

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def run_once(self, now: datetime | None = None) -> int:
        depth, oldest, parked = self.outbox.depth(now)
        metrics.set_outbox(depth, oldest, parked)
        return depth


class Sweep(NamedTuple):
    """One purge of a tick: the jobs of `status` finished more than `age` seconds ago, of job
    type `name` only, or of every type but `excluding`."""

    status: str
    age: float
    name: str | None = None
    excluding: tuple[str, ...] = ()


RESCAN = timedelta(hours=1)  # how far before its last cutoff a sweep reads again (see PurgeFinished)


class PurgeFinished:
    """Delete finished jobs (and their attempts) past their retention age, in bounded batches
    so that a purge never holds long locks; at most `max_batches` per sweep and tick.

    `ages` are the `retain_*` settings, by status. A job type whose definition sets its own
    age for a status (`jobsup.retention`, read again each tick) has its jobs swept at that age
    by a sweep of their own (none, for forever), and the settings' sweep leaves it out if it
    keeps them longer. A sweep reads oldest first: it would read past the jobs left out on
    every tick, and those of a type kept forever grow without end. So once a sweep has left
    nothing to purge, the next reads only the jobs finished since its cutoff, less `RESCAN`
    (a transaction that committed a job's end after the sweep ran, its finish time earlier,
    is shorter than that); a change of the types left out starts again from the oldest.
    A workflow's steps and a batch's children go with their workflow or batch, at the
    settings' ages."""

    name = "retention"

    def __init__(self, store: Store, ages: dict[str, float], batch: int = 1000, max_batches: int = 20) -> None:
        self.store, self.ages, self.batch, self.max_batches = store, ages, batch, max_batches
        self.floors: dict[Sweep, datetime] = {}  # where each sweep reads from, once one has finished

    def sweeps(self, own: Mapping[str, Mapping[str, float | None]]) -> list[Sweep]:
        """This tick's sweeps, given the types' own ages by status (None: forever)."""
        found = []
        for status, age in self.ages.items():
            theirs = own.get(status, {})
            own_sweeps = (Sweep(status, kept, name) for name, kept in sorted(theirs.items()) if kept is not None)
            found += [sweep for sweep in own_sweeps if sweep.age != age]
            longer = tuple(sorted(name for name, kept in theirs.items() if kept is None or kept > age))
            found.append(Sweep(status, age, excluding=longer))  # a shorter-lived type's old jobs too
        return found

    def run_once(self, now: datetime | None = None) -> int:
        at = now or self.store.reads.instant()  # before the sweeps: their floors are cut from it
        floors, purged = {}, 0
        for sweep in self.sweeps(self.store.definitions.own_retention()):
            swept = self.store.retention.sweep(
                sweep.status,
                older_than=sweep.age,
                name=sweep.name,
                excluding=sweep.excluding,
                since=self.floors.get(sweep),
                batch=self.batch,
                max_batches=self.max_batches,
                now=now,
            )
            purged += swept.purged
            if swept.done:
                floors[sweep] = at - timedelta(seconds=sweep.age) - RESCAN
            elif sweep in self.floors:
                floors[sweep] = self.floors[sweep]
        self.floors = floors  # a sweep the types' ages no longer make is forgotten
        purged += self.store.retention.purge_workflows_and_batches(self.ages, batch=self.batch, now=now)
        if purged:
            emit("jobs.purged", count=purged)
        return purged


class ForgetIdleKeys:
    """Delete the rows of concurrency keys with no job admitted (keys per customer would
    otherwise pile up, one row each forever)."""

    name = "idle_keys"

    def __init__(self, store: Store) -> None:
        self.store = store

    def run_once(self, now: datetime | None = None) -> int:
        return self.store.retention.forget_idle_keys()


class RepairKeys:
    """Recount the concurrency keys that have jobs waiting from the job rows, and let those
    in while their key has room (`jobsup.store.concurrency_keys.repair`): a count a transition failed
    to keep costs at most one maintenance interval, never a key stuck with room."""

    name = "repair_keys"

    def __init__(self, store: Store, batch: int = 100) -> None:
        self.store, self.batch = store, batch

    def run_once(self, now: datetime | None = None) -> int:
        t = self.store.transitions
        with t.db.read("maintenance") as conn:
            keys = concurrency_keys.keys_waiting(conn, self.batch)
        clock = t.dialect.clock_params(now)
        repaired = 0
        for key in keys:
            try:
                with t.db.transaction("maintenance") as conn:
                    kept, admitted, woken = concurrency_keys.repair(conn, t.sql, key, clock)
                    if woken:
                        t.dialect.after_enqueue(conn, woken)
            except LockBusy:
                continue  # held by a caller's open transaction: its next tick looks again
            if kept != admitted:
                repaired += 1
                emit("concurrency.repaired", key=key, counted=kept, admitted=admitted)
        return repaired


class PurgeAudit:
    """Delete audit rows older than `retain_audit`, in bounded batches."""

    name = "audit_retention"

    def __init__(self, store: Store, age: float, batch: int = 1000, max_batches: int = 20) -> None:
        self.store, self.age, self.batch, self.max_batches = store, age, batch, max_batches

    def run_once(self, now: datetime | None = None) -> int:
        purged = self.store.audit.purge(self.age, batch=self.batch, max_batches=self.max_batches, now=now)
        if purged:
            emit("audit.purged", count=purged)
        return purged


class FinishBatches:
    """Fire the batches whose last child ended in a process that died before it could look
    (see `jobsup.store.batches`)."""

    name = "finish_batches"

    def __init__(self, store: Store) -> None:
        self.store = store

    def run_once(self, now: datetime | None = None) -> int:
        return self.store.transitions.batches.sweep()


class FinishWorkflows:
    """Mark finished (and announce) the workflows whose last step ended in a process that
    died before it could look (see `jobsup.store.workflows`)."""

    name = "finish_workflows"

    def __init__(self, store: Store) -> None:
        self.store = store

    def run_once(self, now: datetime | None = None) -> int:
        return self.store.transitions.workflows.sweep()


class Maintenance:
    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps

    def run_once(self, now: datetime | None = None) -> None:
        for step in self.steps:
            report_errors(step.name, lambda step=step: step.run_once(now), event="maintenance.failed", step=step.name)  # type: ignore[misc]
