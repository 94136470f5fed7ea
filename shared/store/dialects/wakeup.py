"""Same-host wakeups for a database without notifications (SQLite).

Each idle worker owns a FIFO in ``<database>-jobsup/wake/``, named for its queue and its
process; it waits on it with `select`, as PostgreSQL workers wait on their LISTEN
connection. After an enqueue commits, the enqueuing process writes one byte to the FIFO of
every worker of that queue. The byte only says "look now": the worker's claim decides, and
its poll still finds every job whose poke was lost (an enqueuer that died between its
commit and its poke, a FIFO removed by hand, a full pipe).

The worker opens its FIFO for reading and writing, so it never sees end-of-file when no
poker has it open; a poker opens it write-only and non-blocking, which fails with ENXIO once
the worker is gone, and then removes the stale FIFO.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import os
from collections.abc import Iterable
from pathlib import Path

_SUFFIX = ".fifo"
EARLY = b"?"  # the poke of an enqueue whose COMMIT may not have returned yet
_serial = itertools.count()


def _prefix(queue: str) -> str:
    return hashlib.sha1(queue.encode()).hexdigest()[:16] + "."


class FifoListener:
    """One worker's FIFO: readable when an enqueue of its queue has committed."""

    early = False  # the last drain found a poke sent before its COMMIT (see `poke`)

    def __init__(self, folder: Path, queue: str) -> None:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = folder / f"{_prefix(queue)}{os.getpid()}.{next(_serial)}{_SUFFIX}"
        # Made under a name no poker looks at, opened, then renamed into place (replacing any
        # FIFO a dead process with this pid left): a poker that found the dead one unread
        # and removes it cannot remove this one before it is open.
        making = folder / f".{self.path.name}.new"
        with contextlib.suppress(FileNotFoundError):
            making.unlink()
        os.mkfifo(making, 0o600)
        self.fd = os.open(making, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        os.replace(making, self.path)

    def fileno(self) -> int:
        return self.fd

    def drain(self) -> None:
        self.early = False
        with contextlib.suppress(BlockingIOError):
            while data := os.read(self.fd, 4096):
                self.early = self.early or EARLY in data

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
        with contextlib.suppress(OSError):
            os.close(self.fd)

    @property
    def present(self) -> bool:
        """Whether pokers can still find this FIFO (someone may have removed it)."""
        return self.path.exists()


def poke(folder: Path, queues: Iterable[str], *, early: bool = False) -> int:
    """Wake the workers of `queues` waiting in `folder`; returns how many were poked.
    `early`: sent before the COMMIT it announces (the caller's own transaction), so a worker
    that finds nothing looks again shortly. Never raises: a lost poke costs latency only."""
    prefixes = tuple(_prefix(queue) for queue in queues)
    try:
        names = [entry.name for entry in os.scandir(folder)]
    except OSError:
        return 0  # no worker has waited here yet
    poked = 0
    for name in names:
        if not (name.endswith(_SUFFIX) and name.startswith(prefixes)):
            continue
        path = folder / name
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nobody reads it: its worker is gone
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        try:
            os.write(fd, EARLY if early else b"!")
            poked += 1
        except BlockingIOError:
            poked += 1  # full of pokes it has not read yet: it will look
        except OSError:
            pass
        finally:
            os.close(fd)
    return poked
