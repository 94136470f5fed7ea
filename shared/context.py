"""What a running job sees of itself."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class JobContext:
    """Passed to every job function as its first argument.

    `cancelled` is set when the job should stop: it was cancelled, its timeout passed, its
    lease could not be renewed, or the worker is shutting down. A long job should check it
    (or wait on it) and return, or call `raise_if_cancelled()` from deep inside; one that
    ignores it is ended with its worker process before its lease could lapse. Once it is
    set, the attempt ends as the reason says whatever the job returns: released on shutdown
    (the attempt does not count), `timed_out` on a timeout, `cancelled` when an operator
    cancelled it. `actor` is whoever enqueued the job, as they said; it is shown, never
    used for authorisation.
    """

    job_id: int
    name: str
    queue: str
    attempt: int
    max_attempts: int
    payload: Any
    actor: str | None
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False)

    def raise_if_cancelled(self) -> None:
        """Raise `jobsup.Cancelled` if the job was asked to stop."""
        if self.cancelled.is_set():
            from jobsup.errors import Cancelled

            raise Cancelled()
