"""A worker's life after fork, in order: hygiene, boot, run, exit with a named code."""

from __future__ import annotations

import logging
import os
import signal
from typing import NoReturn

from setproctitle import setproctitle

from jobsup import exits
from jobsup.observe.events import event, log
from jobsup.store.database import Database
from jobsup.worker.loop import Worker
from jobsup.worker.spec import WorkerSpec
from jobsup.worker.stop import StopRequest

_SUPERVISOR_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP, signal.SIGQUIT)


def main(
    spec: WorkerSpec, inherited: list[Database], inherited_fds: list[int], signal_mask: set[int | signal.Signals]
) -> NoReturn:
    """Run in the forked child; never returns into the supervisor's code. The supervisor's
    signals arrive blocked; `signal_mask` is the mask to restore once ours are installed."""
    try:
        worker = boot(spec, inherited, inherited_fds, signal_mask)
    except Exception as exc:
        event("worker.boot_failed", worker=spec.label, error=f"{type(exc).__name__}: {exc}")
        _exit(exits.BOOT_FAILED)
    try:
        code = worker.run()
    except Exception:
        log.exception("worker.crashed worker=%s", spec.label)
        code = exits.CRASHED
    event("worker.stopped", worker=spec.label, code=code)
    _exit(code)


def boot(
    spec: WorkerSpec, inherited: list[Database], inherited_fds: list[int], signal_mask: set[int | signal.Signals]
) -> Worker:
    # 1. Signals: the supervisor's handlers must not run here; then the worker's own.
    signal.set_wakeup_fd(-1)
    for signum in _SUPERVISOR_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    for fd in inherited_fds:  # e.g. the supervisor's /metrics socket: an orphan must not hold the port
        os.close(fd)
    stop = StopRequest()
    stop.install()
    signal.pthread_sigmask(signal.SIG_SETMASK, signal_mask)
    # 2. The parent's pooled connections belong to the parent: forget them without closing.
    for db in inherited:
        db.dispose(close=False)
    setproctitle(f"jobsup: worker {spec.label} booting")
    # 3. Our own engine, created after the fork.
    db = Database(spec.settings.database_url, role="worker")
    return Worker(spec, db, stop)


def _exit(code: int) -> NoReturn:
    logging.shutdown()
    os._exit(code)
