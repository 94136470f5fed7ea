"""The maintenance tick: small steps, each `run_once(now)`, safe on every instance at once
(every write is a compare-and-set). One step's failure is logged and counted and does not
stop the others."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from jobsup.backoff import retry_in_for
from jobsup.errors import JobsupError
from jobsup.events import event
from jobsup.processes import ProcessTable, stale_age
from jobsup.store import Store


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
