"""The supervisor's periodic database chores, on a thread of their own: keeping the process
table in step with the live workers (with the heartbeat), maintenance and the cron tick.

They used to run in the arbiter's loop. On a host cut off from the database each call
waits out a connect or TCP timeout (seconds to half a minute), and a maintenance tick is a
dozen calls: the loop then neither reaped nor restarted workers nor handled SIGTERM for
most of a minute. Here a database that does not answer delays only these chores.

The process table is reconciled, not just written once: rows that could not be written
(a worker spawned while the database was unreachable) or that another instance pruned (a
host cut off past the stale age) are inserted again, and the rows of workers that died are
deleted, by this thread alone, so two writers never race on one row.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jobsup.observe.events import emit
from jobsup.store.store import Store
from jobsup.supervisor.guard import report_errors

TICK = 0.2  # seconds between looks for a due chore or a changed set of workers
CRON_EVERY = 1.0  # seconds between looks for due recurring schedules


@dataclass(frozen=True)
class Registration:
    """A row the process table should hold for this supervisor."""

    id: str
    pid: int
    queue: str | None = None


class ProcessRows:
    """This supervisor's rows in the process table, brought in line with what is alive."""

    def __init__(self, store: Store, supervisor_id: str) -> None:
        self.store, self.id = store, supervisor_id
        self.host = socket.gethostname()
        self.synced: frozenset[Registration] = frozenset()
        # Set when the supervisor stops: a sync then writes no more rows, so one that was
        # under way cannot put rows back after the supervisor deregistered them all.
        self.closed = threading.Event()

    def sync(self, workers: Sequence[Registration], heartbeat: bool) -> bool:
        """Refresh the heartbeat if asked; insert what is missing and delete what is dead
        when the rows do not match. True once done (an error propagates)."""
        wanted = frozenset(workers)
        table = self.store.processes
        if heartbeat:
            refreshed = table.process_heartbeat(self.id)
            if refreshed == len(wanted) + 1 and wanted == self.synced:
                return True
        elif wanted == self.synced:
            return True
        present = table.process_ids(self.id)
        table.process_deregister(sorted(present - {worker.id for worker in wanted} - {self.id}))
        missing = [Registration(self.id, os.getpid())] if self.id not in present else []
        missing += sorted((w for w in wanted if w.id not in present), key=lambda w: w.id)
        for row in missing:
            if self.closed.is_set():  # the only writes that could put a deregistered row back
                return True
            worker = row.id != self.id
            table.process_register(
                id=row.id,
                kind="worker" if worker else "supervisor",
                host=self.host,
                pid=row.pid,
                supervisor_id=self.id if worker else None,
                queue=row.queue,
            )
        self.synced = wanted
        return True


class Chores:
    """Runs the chores every `TICK` until stopped. `workers` returns the live workers (from
    the loop's thread: a snapshot it publishes, never its live structures)."""

    def __init__(
        self,
        rows: ProcessRows,
        workers: Callable[[], Sequence[Registration]],
        heartbeat_every: float,
        maintenance: Callable[[], object],
        maintenance_every: float,
        cron: Callable[[], object] | None,
    ) -> None:
        self.rows, self.workers = rows, workers
        self.schedule: list[tuple[float, Callable[[], object]]] = [(maintenance_every, maintenance)]
        if cron is not None:
            self.schedule.append((CRON_EVERY, lambda: report_errors("recurring", cron)))
        self.heartbeat_every = heartbeat_every
        self.stopped = threading.Event()
        self.winding_down = threading.Event()
        self.thread = threading.Thread(target=self._run_forever, name="jobsup-chores", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def wind_down(self) -> None:
        """From now on only the process table and its heartbeat: no maintenance, no cron.
        While the supervisor waits out the shutdown grace its rows stay fresh (a long
        grace outlived the stale age, and another instance pruned a supervisor still
        stopping) and follow its workers as they leave."""
        self.winding_down.set()

    def stop(self, wait: float) -> None:
        """Stop after the chore under way; wait at most `wait` seconds for it (one hanging
        on a dead connection is left behind: its thread is a daemon, and writes no row
        after its statement under way)."""
        self.rows.closed.set()
        self.winding_down.set()
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(wait)

    def _run_forever(self) -> None:
        next_heartbeat = next_sync = 0.0
        due = [0.0 for _ in self.schedule]
        while not self.stopped.wait(TICK):
            try:
                now = time.monotonic()
                if now >= next_sync:
                    heartbeat = now >= next_heartbeat
                    if heartbeat:
                        next_heartbeat = now + self.heartbeat_every
                    synced = report_errors("process_heartbeat", lambda: self.rows.sync(self.workers(), heartbeat))  # noqa: B023
                    # While the database is away, try again (and say so) once a second at most.
                    next_sync = now if synced else now + min(1.0, self.heartbeat_every)
                for n, (every, chore) in enumerate(self.schedule):
                    if self.winding_down.is_set():  # stop() sets it too
                        break
                    if time.monotonic() >= due[n]:
                        due[n] = time.monotonic() + every
                        chore()
            except Exception as exc:  # never let the chores stop
                emit("supervisor.chores_failed", exc=exc)
