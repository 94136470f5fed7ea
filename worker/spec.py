"""What the supervisor hands a worker it forks."""

from __future__ import annotations

from dataclasses import dataclass

from jobsup.settings import Settings


@dataclass(frozen=True)
class WorkerSpec:
    settings: Settings
    queue: str
    index: int  # 1-based within its queue: default#1, default#2
    worker_id: str  # the process row id and the lease owner
    supervisor_pid: int

    @property
    def label(self) -> str:
        return f"{self.queue}#{self.index}"
