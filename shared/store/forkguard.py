"""Forking beside threads that use the database, on databases whose connections keep their
locks in the process's memory (SQLite, `Dialect.locks_in_process`).

Many threads may use the database at once; `forking()` waits until none does and holds new
users back until the fork is done, so the child never inherits a connection mid-transaction.
A thread already using the database (a nested use) is never held back, so it cannot
deadlock against a fork waiting for it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ForkGuard:
    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.users = 0
        self.fork_waiting = False
        self.depth = threading.local()

    @contextmanager
    def using(self) -> Iterator[None]:
        nested = getattr(self.depth, "value", 0)
        with self.changed:
            while self.fork_waiting and not nested:
                self.changed.wait()
            self.users += 1
        self.depth.value = nested + 1
        try:
            yield
        finally:
            self.depth.value = nested
            with self.changed:
                self.users -= 1
                self.changed.notify_all()

    @contextmanager
    def forking(self) -> Iterator[None]:
        with self.changed:
            self.fork_waiting = True
            while self.users:
                self.changed.wait()
        try:
            yield
        finally:
            with self.changed:
                self.fork_waiting = False
                self.changed.notify_all()
