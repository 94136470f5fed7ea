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
    (or wait on it) and return; one that ignores it is ended with its worker process before
    its lease could lapse. `actor` is whoever enqueued the job, as they said; it is shown,
    never used for authorisation.
    """

    job_id: int
    name: str
    queue: str
    attempt: int
    max_attempts: int
    payload: Any
    actor: str | None
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False)
