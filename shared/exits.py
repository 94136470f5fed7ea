"""Named worker exit codes: how the supervisor tells a crash from a boot failure (stop
restarting) from a worker that ended itself to keep a promise."""

from __future__ import annotations

import os
import signal
from typing import NoReturn

STOPPED = 0  # asked to stop, and did
CRASHED = 1  # an unexpected error in the worker itself
BOOT_FAILED = 3  # could not start: restarting would fail the same way
LEASE_LOST = 4  # its job outlived a lease it could not renew: ended before the lease lapsed
TIMED_OUT = 5  # its job ignored the timeout's cancellation: ended after recording it
PARENT_GONE = 6  # the supervisor died
SHUTDOWN_FORCED = 7  # its job ignored shutdown: released and ended

NAMES = {
    STOPPED: "stopped",
    CRASHED: "crashed",
    BOOT_FAILED: "failed at boot",
    LEASE_LOST: "ended itself: lease lost",
    TIMED_OUT: "ended itself: job timed out",
    PARENT_GONE: "stopped: supervisor gone",
    SHUTDOWN_FORCED: "ended itself: job ignored shutdown",
}


def describe(status: int) -> str:
    """A waitpid status in words: ``exited 4 (ended itself: lease lost)`` or ``killed by SIGKILL``."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:  # a real-time signal has no name
            return f"killed by signal {number}"
    code = os.WEXITSTATUS(status)
    return f"exited {code} ({NAMES.get(code, 'unknown')})"


def now(code: int) -> NoReturn:
    """End this process at once with `code`, after flushing the log."""
    import logging

    logging.shutdown()
    os._exit(code)
