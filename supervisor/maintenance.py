"""The maintenance tick: small steps, each `run_once(now)`, safe on every instance at once
(every write is a compare-and-set). One step's failure is logged and counted and does not
stop the others."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from jobsup.backoff import retry_in_for
from jobsup.clock import host_clock
from jobsup.errors import JobsupError
from jobsup.observe import metrics
from jobsup.observe.events import event, log
from jobsup.store import Store
from jobsup.store.processes import ProcessTable, stale_age
from jobsup.store.schema import DEAD_LETTERED, PENDING, RUNNING


class Step(Protocol):
    name: str

    def run_once(self, now: datetime | None = None) -> int: ...


class ExpireLeases:
    """Close leases that lapsed: the attempt ends `lease_expired`, the job retries or is
    dead-lettered when that was its last attempt."""

    name = "expire_leases"

    def __init__(self, store: Store) -> None:
        self.store = store

    def run_once(self, now: datetime | None = None) -> int:
        closed = self.store.job_expire_leases(retry_in_for, now=now)
        if closed:
            event("leases.expired", count=closed)
        return closed


class PruneProcesses:
    """Delete process rows of instances that stopped heartbeating."""

    name = "prune_processes"

    def __init__(self, processes: ProcessTable, heartbeat_interval: float) -> None:
        self.processes = processes
        self.stale_after = stale_age(heartbeat_interval)

    def run_once(self, now: datetime | None = None) -> int:
        pruned = self.processes.process_prune(self.stale_after, now=now)
        if pruned:
            event("processes.pruned", count=len(pruned))
        return len(pruned)


class QueueGauges:
    """Refresh the queue depth and oldest-pending-age gauges."""

    name = "queue_gauges"
    STATUSES = (PENDING, RUNNING, DEAD_LETTERED)

    def __init__(self, store: Store) -> None:
        self.store = store

    def run_once(self, now: datetime | None = None) -> int:
        counts, first_due = self.store.job_counts(self.STATUSES, now=now)
        queues = {queue for queue, _ in counts} | set(first_due)
        depths = {(queue, status): counts.get((queue, status), 0) for queue in queues for status in self.STATUSES}
        at = now or host_clock()
        oldest = {
            queue: (at - first).total_seconds() if first is not None else 0.0 for queue, first in first_due.items()
        }
        metrics.set_queue_depths(depths, {queue: oldest.get(queue, 0.0) for queue in queues})
        return len(queues)


class PurgeFinished:
    """Delete finished jobs (and their attempts) past their retention age, in bounded batches
    so that a purge never holds long locks; at most `max_batches` per tick."""

    name = "retention"

    def __init__(self, store: Store, ages: dict[str, float], batch: int = 1000, max_batches: int = 20) -> None:
        self.store, self.ages, self.batch, self.max_batches = store, ages, batch, max_batches

    def run_once(self, now: datetime | None = None) -> int:
        purged = 0
        for status, age in self.ages.items():
            for _ in range(self.max_batches):
                ids = self.store.job_finished_ids(status, older_than=age, limit=self.batch, now=now)
                if not ids:
                    break
                purged += self.store.job_delete(ids, status=status, operation="retention")
        if purged:
            event("jobs.purged", count=purged)
        return purged


class Maintenance:
    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.errors: dict[str, int] = {step.name: 0 for step in steps}

    def run_once(self, now: datetime | None = None) -> None:
        for step in self.steps:
            try:
                step.run_once(now)
            except JobsupError as exc:
                self.errors[step.name] += 1
                event("maintenance.failed", step=step.name, error=exc)
            except Exception:
                self.errors[step.name] += 1
                log.exception("maintenance.failed step=%s", step.name)
                event("maintenance.failed", step=step.name, error="unexpected error, see the traceback above")
