"""The supervisor's children: spawn, reap, signal, restart with backoff.

Each configured worker is a slot (``default#1``); a slot whose worker died is refilled,
at once after a clean stop, after a growing delay after a crash, so a worker that dies as
it starts does not fork-loop. A worker that exits `BOOT_FAILED` stops all restarts: the
next one would fail the same way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from jobsup import exits
from jobsup.settings import Settings
from jobsup.worker.spec import WorkerSpec

QUICK_DEATH = 10.0  # a worker that dies sooner than this after its start counts towards backoff
MAX_RESTART_DELAY = 30.0


@dataclass
class Slot:
    queue: str
    index: int
    failures: int = 0
    restart_at: float = 0.0  # monotonic; 0: fill now

    @property
    def label(self) -> str:
        return f"{self.queue}#{self.index}"


@dataclass
class Child:
    pid: int
    slot: Slot
    worker_id: str
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Death:
    child: Child
    status: int

    @property
    def code(self) -> int | None:
        return os.WEXITSTATUS(self.status) if os.WIFEXITED(self.status) else None

    @property
    def clean(self) -> bool:
        return self.code in (exits.STOPPED, exits.LEASE_LOST, exits.TIMED_OUT, exits.SHUTDOWN_FORCED)


class Children:
    def __init__(self, settings: Settings, fork_child: Callable[[WorkerSpec], int]) -> None:
        self.settings = settings
        self.fork_child = fork_child  # forks and runs the worker in the child; returns the pid
        self.slots = [
            Slot(queue, index) for queue, config in settings.queues.items() for index in range(1, config.workers + 1)
        ]
        self.alive: dict[int, Child] = {}
        self.host = socket.gethostname()

    def spawn_due(self) -> list[Child]:
        """Fork a worker for every empty slot whose restart delay has passed."""
        busy = {child.slot.label for child in self.alive.values()}
        now, spawned = time.monotonic(), []
        for slot in self.slots:
            if slot.label not in busy and now >= slot.restart_at:
                spawned.append(self.spawn(slot))
        return spawned

    def spawn(self, slot: Slot) -> Child:
        worker_id = f"{self.host}:{slot.label}:{uuid.uuid4().hex[:12]}"
        spec = WorkerSpec(self.settings, slot.queue, slot.index, worker_id, os.getpid())
        child = Child(self.fork_child(spec), slot, worker_id)
        self.alive[child.pid] = child
        return child

    def reap(self) -> list[Death]:
        """Collect every child that has exited, without blocking."""
        deaths = []
        while self.alive:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            child = self.alive.pop(pid, None)
            if child is not None:
                deaths.append(Death(child, status))
        return deaths

    def schedule_restart(self, death: Death) -> float:
        """When the dead worker's slot may be refilled; returns the delay in seconds."""
        slot = death.child.slot
        lived = time.monotonic() - death.child.started
        if death.code == exits.STOPPED or lived >= QUICK_DEATH:
            slot.failures = 0
        else:
            slot.failures += 1
        delay = 0.0 if slot.failures == 0 else min(MAX_RESTART_DELAY, 0.5 * 2 ** (slot.failures - 1))
        slot.restart_at = time.monotonic() + delay
        return delay

    def counts(self) -> dict[str, int]:
        """Live workers per configured queue (zero included)."""
        live = {slot.queue: 0 for slot in self.slots}
        for child in self.alive.values():
            live[child.slot.queue] += 1
        return live

    def signal_all(self, signum: int) -> None:
        for pid in list(self.alive):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def kill_all(self) -> None:
        self.signal_all(signal.SIGKILL)
