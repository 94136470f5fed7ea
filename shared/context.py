"""What a running job sees of itself."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from jobsup.client import Client


class JobLog(Protocol):
    """`ctx.log`: `logging`'s calls and %-formatting; in a worker each line is stored with the
    job's attempt (docs/how-to/job-logs.md) and mirrored to the ``jobsup.job.<name>`` logger."""

    def debug(self, msg: object, *args: object) -> None: ...
    def info(self, msg: object, *args: object) -> None: ...
    def warning(self, msg: object, *args: object) -> None: ...
    def error(self, msg: object, *args: object) -> None: ...
    def exception(self, msg: object, *args: object) -> None: ...


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
    # The job's own logger (lines stored with the job, see `jobsup.worker.joblog`); a plain
    # `logging.Logger` where the job runs outside a worker.
    log: JobLog = field(default=None, compare=False, repr=False)  # type: ignore[assignment]  # set in __post_init__
    # Reads the stored results of a workflow step's dependencies, when first asked for.
    upstream_loader: Callable[[], Mapping[str, Any]] | None = field(default=None, compare=False, repr=False)
    client_loader: Callable[[], Client] | None = field(default=None, compare=False, repr=False)
    # Stores a progress report (JSON text) for this attempt (`set_progress`); None outside a worker.
    progress_writer: Callable[[str], object] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.log is None:
            import logging

            object.__setattr__(self, "log", logging.getLogger(f"jobsup.job.{self.name}"))

    @property
    def client(self) -> Client:
        """A `jobsup.Client` on the database this job came from (to enqueue follow-ups)."""
        if self.client_loader is None:
            from jobsup.errors import ConfigurationError

            raise ConfigurationError("this job runs outside a jobsup worker: it has no client")
        return self.client_loader()

    @property
    def upstream(self) -> Mapping[str, Any]:
        """A workflow step's dependencies' results, by step name (empty for any other job).
        Read from the database on first use, then kept."""
        cached = self.__dict__.get("_upstream")
        if cached is None:
            cached = {} if self.upstream_loader is None else dict(self.upstream_loader())
            object.__setattr__(self, "_upstream", cached)
        return cached

    def set_progress(self, value: Any) -> None:
        """Report how far the job has come: a number from 0 to 1, or a small JSON object (at
        most 1,000 characters as JSON), e.g. ``{"done": 40, "of": 100}``. The latest report
        is stored on this attempt within about a second, and before its outcome; `Client.get`,
        `jobsup jobs show` and the dashboard show it. Anything else raises `BadInput`.
        Outside a worker it is checked, then dropped."""
        text = _progress_text(value)
        if self.progress_writer is not None:
            self.progress_writer(text)

    def raise_if_cancelled(self) -> None:
        """Raise `jobsup.Cancelled` if the job was asked to stop."""
        if self.cancelled.is_set():
            from jobsup.errors import Cancelled

            raise Cancelled()


def job_context(
    job_id: int,
    name: str,
    queue: str,
    attempt: int,
    max_attempts: int,
    payload: Any,
    actor: str | None,
    cancelled: threading.Event,
    *,
    log: JobLog | None = None,
    upstream_loader: Callable[[], Mapping[str, Any]] | None = None,
    client_loader: Callable[[], Client] | None = None,
    progress_writer: Callable[[str], object] | None = None,
) -> JobContext:
    """A `JobContext` equal to ``JobContext(job_id, ..., cancelled, log=..., upstream_loader=...,
    client_loader=..., progress_writer=...)``, its values given as one dict, without a frozen
    dataclass's per-field ``object.__setattr__``: a worker makes one per job, and the init took
    1.8 µs of a no-op job's 13 (this 0.7; `test_worker_units.py` holds the two equal). As the
    init, it refuses a keyword that is not a field."""
    ctx = _new(JobContext)
    _set(
        ctx,
        "__dict__",
        {
            "job_id": job_id,
            "name": name,
            "queue": queue,
            "attempt": attempt,
            "max_attempts": max_attempts,
            "payload": payload,
            "actor": actor,
            "cancelled": cancelled,
            "log": log,
            "upstream_loader": upstream_loader,
            "client_loader": client_loader,
            "progress_writer": progress_writer,
        },
    )
    if log is None:
        ctx.__post_init__()
    return ctx


_new, _set = object.__new__, object.__setattr__

PROGRESS_CAP = 1000  # characters of JSON a progress report may take


def _progress_text(value: Any) -> str:
    import json
    import math

    from jobsup.errors import BadInput

    if isinstance(value, int | float) and not isinstance(value, bool):
        if not (math.isfinite(value) and 0 <= value <= 1):
            raise BadInput(f"set_progress: {value!r} is not a number from 0 to 1 (write 0.4 for 40 %)")
        return json.dumps(value)
    if isinstance(value, dict):
        try:
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise BadInput(f"set_progress: the object is not JSON ({exc})") from None
        if len(text) > PROGRESS_CAP:
            raise BadInput(f"set_progress: the object takes {len(text)} characters as JSON, over {PROGRESS_CAP}")
        return text
    raise BadInput(f"set_progress takes a number from 0 to 1 or a JSON object (a dict), not {value!r}")
