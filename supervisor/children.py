"""The supervisor's children: spawn, reap, signal, kill, restart with backoff.

Each configured worker is a slot (``default#1``) with its part of the shared slot memory
(`jobsup.worker.slot`); a slot whose worker died is refilled, at once after a clean stop,
after a growing delay after a crash, so a worker that dies as it starts does not fork-loop.
A worker that fails at boot before its slot ever had a worker that booted stops the
supervisor (the next one would fail the same way: a broken app or configuration); once a
slot has booted a worker, later boot failures are retried with backoff like crashes, and
reported by `/healthz` and the metrics while they last.

Every worker leads its own process group; killing one kills the group, so processes its
job started die with it.
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
from jobsup.observe.events import emit
from jobsup.settings import Settings
from jobsup.store.rows import lease_owner
from jobsup.worker.slot import Slot as SlotMemory
from jobsup.worker.slot import SlotTable
from jobsup.worker.spec import WorkerSpec

QUICK_DEATH = 10.0  # a worker that dies sooner than this after its start counts towards backoff
MAX_RESTART_DELAY = 30.0


@dataclass
class Slot:
    queue: str
    index: int
    memory: SlotMemory
    failures: int = 0
    boot_failures: int = 0  # in a row, since a worker of this slot last booted
    ever_booted: bool = False
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
    killed: bool = False


@dataclass(frozen=True)
class Death:
    child: Child
    status: int
    booted: bool  # it had finished booting
    running: list[tuple[int, int, float | None, int]]  # the jobs it was running: see Slot.entries
    # Since when (monotonic) the freshest lease of those is known good (see Slot.leases); the
    # last renewal when it ran nothing; 0.0 when it never claimed.
    leases_good_as_of: float

    @classmethod
    def of(cls, child: Child, status: int) -> Death:
        """What its slot says as the worker is reaped (its replacement resets the slot)."""
        memory = child.slot.memory
        good_as_of = max(memory.leases(), default=memory.renewed_at)
        return cls(child, status, memory.booted, memory.entries(), good_as_of)

    @property
    def code(self) -> int | None:
        return os.WEXITSTATUS(self.status) if os.WIFEXITED(self.status) else None

    @property
    def clean(self) -> bool:
        return self.code in (exits.STOPPED, exits.LEASE_LOST, exits.TIMED_OUT, exits.SHUTDOWN_FORCED)

    @property
    def boot_failed(self) -> bool:
        return self.code == exits.BOOT_FAILED


class Children:
    def __init__(self, settings: Settings, fork_child: Callable[[WorkerSpec, SlotMemory], int]) -> None:
        self.settings = settings
        self.fork_child = fork_child  # forks and runs the worker in the child; returns the pid
        configured = [
            (queue, index) for queue, config in settings.queues.items() for index in range(1, config.workers + 1)
        ]
        capacity = max(config.concurrency for config in settings.queues.values())
        self.table = SlotTable(len(configured), capacity=capacity)
        self.slots = [Slot(queue, index, self.table.slot(n)) for n, (queue, index) in enumerate(configured)]
        self.alive: dict[int, Child] = {}
        self.host = socket.gethostname()

    def spawn_due(self) -> list[Child]:
        """Fork a worker for every empty slot whose restart delay has passed."""
        busy = {child.slot.label for child in self.alive.values()}
        now, spawned = time.monotonic(), []
        for slot in self.slots:
            if slot.label not in busy and now >= slot.restart_at:
                try:
                    spawned.append(self.spawn(slot))
                except OSError as exc:  # fork refused (EAGAIN, ENOMEM): try again later
                    emit("worker.spawn_failed", worker=slot.label, error=exc)
                    slot.restart_at = now + MAX_RESTART_DELAY / 10
        return spawned

    def spawn(self, slot: Slot) -> Child:
        at_once = self.settings.concurrency_of(slot.queue)
        worker_id = lease_owner(self.host, slot.label, uuid.uuid4().hex[:12], at_once)
        spec = WorkerSpec(self.settings, slot.queue, slot.index, worker_id, os.getpid())
        slot.memory.reset()
        pid = self.fork_child(spec, slot.memory)
        with contextlib.suppress(OSError):  # the child does it too; whichever runs first wins
            os.setpgid(pid, pid)
        child = Child(pid, slot, worker_id)
        self.alive[child.pid] = child
        return child

    def reap(self) -> list[Death]:
        """Collect every child that has exited, without blocking, and kill what is left of
        its process group."""
        deaths = []
        while self.alive:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            child = self.alive.pop(pid, None)
            if child is None:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            deaths.append(Death.of(child, status))
        return deaths

    def note_booted(self) -> None:
        """Record the slots whose live worker has booted (a boot failure is then retried)."""
        for child in self.alive.values():
            if child.slot.memory.booted:
                child.slot.ever_booted, child.slot.boot_failures = True, 0

    def schedule_restart(self, death: Death) -> float:
        """When the dead worker's slot may be refilled; returns the delay in seconds."""
        slot = death.child.slot
        lived = time.monotonic() - death.child.started
        if death.boot_failed:
            slot.boot_failures += 1
        if death.code == exits.STOPPED or (lived >= QUICK_DEATH and not death.boot_failed):
            slot.failures = 0
        else:
            slot.failures += 1
        delay = 0.0 if slot.failures == 0 else min(MAX_RESTART_DELAY, 0.5 * 2 ** (slot.failures - 1))
        slot.restart_at = time.monotonic() + delay
        return delay

    def overdue(self, now: float, lease: float, heartbeat: float) -> list[Child]:
        """Live workers running a job whose lease renewal is so overdue that the lease
        would lapse within half a heartbeat: their own lease threads did not end them (a
        job holding the GIL starves them), so the supervisor must."""
        late = lease - heartbeat / 2
        return [
            child
            for child in list(self.alive.values())  # a snapshot: the loop's thread reaps meanwhile
            if not child.killed and (leases := child.slot.memory.leases()) and now - min(leases) > late
        ]

    def failing_boot(self) -> list[Slot]:
        """Slots whose workers keep failing at boot and that have no booted worker now."""
        live = {child.slot.label for child in self.alive.values() if child.slot.memory.booted}
        return [slot for slot in self.slots if slot.boot_failures and slot.label not in live]

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

    def kill(self, child: Child) -> None:
        child.killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)  # in case it never became its group's leader

    def kill_all(self) -> None:
        for child in list(self.alive.values()):
            self.kill(child)
