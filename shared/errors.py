"""The jobsup exception family: every error jobsup raises derives from `JobsupError`.

Each class's docstring is its default message, so `raise SchemaOutdated()` already says
what to do. Driver errors are translated into this family once, where the database is
called (see `jobsup.store.database`), never further up.
"""

from __future__ import annotations

from typing import Any


class JobsupError(Exception):
    """A jobsup error."""

    def __init__(self, message: str | None = None, *args: Any) -> None:
        super().__init__(message or (self.__class__.__doc__ or "").strip(), *args)


class BadInput(JobsupError, ValueError):
    """Invalid input: fix the argument named in this message and try again."""


class InvalidPayload(BadInput, TypeError):
    """The payload is not JSON: jobs take str, int, float, bool, None, lists and dicts with str keys."""


class InvalidDuration(BadInput):
    """A duration must look like 250ms, 10s, 5m, 1h or a plain number of seconds."""


class ConfigurationError(JobsupError):
    """jobsup is configured wrongly: check the setting named in this message."""


class AppImportFailed(ConfigurationError):
    """An --app module could not be imported."""


class UnsupportedDatabase(ConfigurationError):
    """This database URL is not supported."""


class WorkerStartFailed(JobsupError):
    """An `@jobsup.on_worker_start` function raised in a new worker: that worker does not
    start (its supervisor retries with backoff)."""


class DriverMissing(ConfigurationError):
    """The database driver for this URL is not installed."""


class DatabaseError(JobsupError):
    """The database refused a jobsup operation."""


class DatabaseUnavailable(DatabaseError):
    """The database cannot be reached: check that it runs and that the URL's host and port are right."""


class DatabaseMisconfigured(DatabaseUnavailable):
    """The database server answers but will not let jobsup in: no such database, no such
    user, a wrong password. Reported as a configuration error (the command line exits 2,
    naming the fix); a running process's loops wait it out as they wait out an outage, since
    a password being rotated heals without a restart."""


class DatabaseBusy(DatabaseUnavailable):
    """The database answers but takes no work for now (too many connections, read-only
    during a failover): jobsup's own loops wait and try again, as when it cannot reach it."""


class LockBusy(DatabaseError):
    """A row lock stayed held by another transaction past the bounded wait (a concurrency
    key held by a caller's open transaction): nothing was written; try again."""


class Deadlock(DatabaseError):
    """The database rolled this transaction back to end a deadlock with another: nothing of
    it was written, and the same transaction run again usually goes through. jobsup runs its
    own operators' transactions again (`jobsup.store.operators`); in a caller's transaction
    it is the caller's to run again."""


class ConstraintViolation(DatabaseError):
    """The database refused a write that breaks one of its constraints."""


class SchemaOutdated(DatabaseError):
    """The jobsup tables are missing or older than this code: run `jobsup db upgrade`."""


class DuplicateJob(JobsupError):
    """A live job with this unique key already exists."""

    def __init__(self, message: str | None = None, *, existing_id: int | None = None) -> None:
        super().__init__(message)
        self.existing_id = existing_id


class JobNotFound(JobsupError, LookupError):
    """There is no job with this id."""


class WaitTimeout(JobsupError, TimeoutError):
    """`Client.wait` gave up: the job had not finished within its timeout. `job` is the job
    as last seen (its status, its attempts so far)."""

    def __init__(self, message: str, *, job: Any = None) -> None:
        super().__init__(message)
        self.job = job


class UnknownJob(BadInput, LookupError):
    """No job type of this name is registered here or published in the database."""


class UnknownQueue(BadInput, LookupError):
    """No job, job definition, schedule or earlier pause names this queue."""


class Cancelled(JobsupError):
    """Raised inside a job by `ctx.raise_if_cancelled()`: the job was asked to stop (an
    operator cancelled it, its timeout passed, its lease was lost, or its worker is shutting
    down). The attempt ends as the reason says, whatever the job does next."""


class Retry(JobsupError):
    """Raised by a job to end this attempt as failed and run again after a chosen delay.

    `after` takes a duration (``"10s"``, ``30``, a ``timedelta``); None means the job type's
    normal backoff. The attempt is used up like any failure.
    """

    def __init__(self, after: object = None, reason: str | None = None) -> None:
        from jobsup.durations import parse_duration

        self.after = None if after is None else parse_duration(after, what="Retry(after=)")
        super().__init__(reason or "retry requested")


class Discard(JobsupError):
    """Raised by a job to dead-letter it at once, whatever attempts are left."""

    def __init__(self, reason: str = "discarded by the job") -> None:
        super().__init__(reason)
