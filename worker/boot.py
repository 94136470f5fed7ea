"""A worker's life after fork, in order: hygiene, boot, run, exit with a named code."""

from __future__ import annotations

import contextlib
import os
import signal
from typing import NoReturn

from setproctitle import setproctitle

from jobsup import exits
from jobsup.errors import DatabaseError
from jobsup.observe.events import emit
from jobsup.registry import run_worker_starts
from jobsup.store.database import Database
from jobsup.worker.loop import Worker
from jobsup.worker.slot import Slot
from jobsup.worker.spec import WorkerSpec
from jobsup.worker.stop import StopRequest

_SUPERVISOR_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP, signal.SIGQUIT)


def main(
    spec: WorkerSpec,
    slot: Slot,
    inherited: list[Database],
    inherited_fds: list[int],
    signal_mask: set[int | signal.Signals],
) -> NoReturn:
    """Run in the forked child; never returns into the supervisor's code. The supervisor's
    signals arrive blocked; `signal_mask` is the mask to restore once ours are installed."""
    try:
        worker = boot(spec, slot, inherited, inherited_fds, signal_mask)
    except Exception as exc:
        emit("worker.boot_failed", worker=spec.label, queue=spec.queue, error=f"{type(exc).__name__}: {exc}")
        exits.now(exits.BOOT_FAILED)
    try:
        code = worker.run()
    except Exception as exc:
        emit("worker.crashed", worker=spec.label, exc=exc)
        code = exits.CRASHED
    emit("worker.stopped", worker=spec.label, code=code)
    exits.now(code)


def boot(
    spec: WorkerSpec,
    slot: Slot,
    inherited: list[Database],
    inherited_fds: list[int],
    signal_mask: set[int | signal.Signals],
) -> Worker:
    # 1. Its own process group, so that whatever a job starts dies with the worker when the
    #    supervisor kills it.
    os.setpgid(0, 0)
    # 2. Signals: the supervisor's handlers must not run here; then the worker's own.
    signal.set_wakeup_fd(-1)
    for signum in _SUPERVISOR_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    for fd in inherited_fds:  # e.g. the supervisor's /metrics socket: an orphan must not hold the port
        os.close(fd)
    stop = StopRequest()
    stop.install()
    signal.pthread_sigmask(signal.SIG_SETMASK, signal_mask)
    # 3. The parent's pooled connections belong to the parent: forget them without closing.
    for db in inherited:
        db.dispose(close=False)
    setproctitle(f"jobsup: worker {spec.label} booting")
    # 4. Our own engine, created after the fork, proof of life for the lease sweep, and the
    #    connections a claim and its write use at once, opened now.
    db = Database(spec.settings.database_url, role="worker", listen_url=spec.settings.listen_url)
    owner_lock = db.dialect.hold_owner(db, spec.worker_id)
    open_ahead(db)
    slot.reset()
    run_worker_starts()  # the application's `@jobsup.on_worker_start` (Sentry, pools)
    worker = Worker(spec, db, stop, slot, owner_lock)
    slot.mark_booted()
    return worker


def open_ahead(db: Database) -> None:
    """Open now the connections the worker's claims and writes use at once
    (`Dialect.connections_ahead`: on PostgreSQL two, none elsewhere), so that the first write
    does not open one in the middle of the worker's first batch (a new PostgreSQL connection
    took 2.5-4 ms here); leaving the block gives them back to the pool, open. Best effort: an
    outage is the first claim's to report, with its back-off."""
    with contextlib.suppress(DatabaseError), db.errors(), contextlib.ExitStack() as opened:
        for _ in range(db.dialect.connections_ahead):
            opened.enter_context(db.single.connect())  # each held, so the next is another
