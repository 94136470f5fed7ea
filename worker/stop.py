"""A stop request from a signal, safe to record inside a handler.

The handler only stores a timestamp and writes one byte to a pipe (both safe in a signal
handler; no locks, no logging). The idle wait selects on the pipe so it wakes at once; the
lease thread reads the timestamp to time the shutdown grace.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from types import FrameType

# What a supervisor sends its workers on a second SIGINT: stop now. A signal of its own, not
# SIGINT again: the supervisor's SIGTERM (stop, with the grace) and its SIGINT can both be
# pending in a busy worker, and Python runs pending handlers in signal-number order, SIGINT
# (2) before SIGTERM (15), so the "second" SIGINT was taken for the first and the worker
# waited out the grace until it was killed (its job then counted an attempt it never lost).
STOP_NOW = signal.SIGUSR1


class StopRequest:
    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self._write_fd, False)
        self.requested_at: float | None = None
        self.immediate = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(STOP_NOW, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == STOP_NOW or (self.requested_at is not None and signum == signal.SIGINT):
            self.immediate = True  # the supervisor's stop-now, or a second Ctrl-C at the terminal
        if self.requested_at is None:
            self.requested_at = time.monotonic()
        with contextlib.suppress(BlockingIOError):  # a full pipe will wake the waiter anyway
            os.write(self._write_fd, b"x")

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.read_fd, 512):
                pass
