"""The Python API: enqueue jobs, look at them, cancel them, and handle dead letters."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from jobsup.cron import check_cron, zone
from jobsup.durations import parse_duration
from jobsup.errors import BadInput
from jobsup.observe.events import event
from jobsup.payload import encode_payload
from jobsup.registry import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, check_attempts, check_name, lookup
from jobsup.store import Store
from jobsup.store.database import Database
from jobsup.store.recurring import RecurringStore
from jobsup.store.rows import Job, NewJob, RecurringSchedule
from jobsup.store.schema import DEAD_LETTERED, STATUSES

_ENQUEUE_KEYS = {
    "name",
    "payload",
    "queue",
    "priority",
    "run_at",
    "delay",
    "max_attempts",
    "timeout",
    "unique_key",
    "actor",
}


class Client:
    """A handle on one jobsup database.

    `database_url` defaults to the configured one (``JOBSUP_DATABASE_URL``, ``jobsup.toml``),
    else ``sqlite:///jobsup.db``. The schema must have been created with
    ``jobsup db upgrade`` (``jobsup start`` does it); a missing or older schema raises
    `SchemaOutdated` on first use.
    """

    def __init__(self, database_url: str | None = None) -> None:
        if database_url is None:
            from jobsup.settings import load

            database_url = load().database_url
        self.database = Database(database_url)
        self.store = Store(self.database)
        self.recurring = RecurringStore(self.database)
        self.dead_letters = DeadLetters(self)
        self._schema_checked = False

    def enqueue(
        self,
        name: str,
        payload: Any = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: object = None,
        max_attempts: int | None = None,
        timeout: object = None,
        unique_key: str | None = None,
        actor: str | None = None,
        connection: Connection | None = None,
    ) -> int:
        """Store a job and return its id. With `connection` (your SQLAlchemy Connection) the
        job is written in your transaction and commits or rolls back with it.

        `run_at` must be timezone-aware; `delay` is a duration from now (not both). With a
        `unique_key`, a second enqueue while the first job with that key is pending or
        running returns the first job's id. Options not given come from the job's
        registration when this process has it, else from the defaults."""
        new = _new_job(
            name,
            payload,
            queue=queue,
            priority=priority,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            timeout=timeout,
            unique_key=unique_key,
            actor=actor,
        )
        self._ready()
        job_id = self.store.job_enqueue([new], connection=connection)[0]
        event("job.enqueued", job=job_id, name=new.name, queue=new.queue)
        return job_id

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]], *, connection: Connection | None = None) -> list[int]:
        """Store many jobs in one round trip per batch; each is a mapping with the keys of
        `enqueue` (``name`` required). All are checked before any is written."""
        news = []
        for index, spec in enumerate(jobs):
            unknown = set(spec) - _ENQUEUE_KEYS
            if unknown or "name" not in spec:
                problem = f"unknown keys {sorted(unknown)}" if unknown else "no 'name'"
                raise BadInput(f"jobs[{index}] has {problem}; keys are {sorted(_ENQUEUE_KEYS)}")
            options = {key: value for key, value in spec.items() if key not in ("name", "payload")}
            news.append(_new_job(spec["name"], spec.get("payload"), **options))
        if not news:
            return []
        self._ready()
        ids = self.store.job_enqueue(news, connection=connection)
        for (queue, name), count in Counter((new.queue, new.name) for new in news).items():
            event("job.enqueued", name=name, queue=queue, count=count)
        return ids

    def get(self, job_id: int) -> Job | None:
        """The job with its attempt history, or None if there is no such job."""
        self._ready()
        return self.store.job_get(_job_id(job_id))

    def cancel(self, job_id: int) -> bool:
        """Cancel a pending or running job; False if it had already finished or does not exist."""
        self._ready()
        return self.store.job_cancel(_job_id(job_id))

    def list_jobs(self, *, status: str | None = None, queue: str | None = None, limit: int = 100) -> list[Job]:
        """Jobs, newest first, without their history (use `get` for that)."""
        if status is not None and status not in STATUSES:
            raise BadInput(f"status {status!r} is not one of {', '.join(STATUSES)}")
        self._ready()
        return self.store.job_list(status=status, queue=queue, limit=_limit(limit))

    # -- recurring schedules ------------------------------------------------------------

    def add_recurring(
        self,
        name: str,
        *,
        job: str,
        cron: str,
        payload: Any = None,
        queue: str | None = None,
        timezone: str = "UTC",
        priority: int | None = None,
    ) -> RecurringSchedule:
        """Add or update the schedule `name`: run `job` with `payload` at each `cron` slot in
        `timezone`. Safe to call at every startup on every instance: the same cron keeps
        its next run, a changed one starts from now. A bad cron or time zone raises
        `BadInput` and writes nothing."""
        check_name(name, "schedule name")
        check_name(job, "job name")
        registered = lookup(job)
        self._ready()
        return self.recurring.recurring_upsert(
            name=name,
            job_name=job,
            cron=check_cron(cron),
            timezone=zone(timezone).key,
            payload=encode_payload(payload),
            queue=check_name(queue or (registered.queue if registered else DEFAULT_QUEUE), "queue"),
            priority=priority if priority is not None else (registered.priority if registered else 0),
        )

    def remove_recurring(self, name: str) -> bool:
        self._ready()
        return self.recurring.recurring_remove(name)

    def set_recurring_enabled(self, name: str, enabled: bool) -> bool:
        """Pause or resume a schedule; resuming starts from now (no catch-up). False if unknown."""
        self._ready()
        return self.recurring.recurring_set_enabled(name, enabled)

    def list_recurring(self) -> list[RecurringSchedule]:
        self._ready()
        return self.recurring.recurring_list()

    # -- operations ---------------------------------------------------------------------

    def workers(self) -> list[dict[str, Any]]:
        """Every registered supervisor and worker, with the job each worker holds."""
        from jobsup.store.processes import ProcessTable

        self._ready()
        held = self.store.job_held_by()
        return [
            {
                "id": row.id,
                "kind": row.kind,
                "host": row.host,
                "pid": row.pid,
                "queue": row.queue,
                "supervisor_id": row.supervisor_id,
                "state": "supervising" if row.kind == "supervisor" else ("running" if row.id in held else "idle"),
                "job": held.get(row.id),
                "started_at": row.started_at,
                "heartbeat_at": row.heartbeat_at,
            }
            for row in ProcessTable(self.database).process_list()
        ]

    def stats(self, *, window: object = "5m") -> list[dict[str, Any]]:
        """Per queue: counts by status, the oldest due pending job's age, and successes per
        minute over the last `window`."""
        from jobsup.clock import host_clock
        from jobsup.store.schema import STATUSES

        seconds = parse_duration(window, what="window")
        if seconds <= 0:
            raise BadInput("window must be longer than zero")
        self._ready()
        counts, first_due = self.store.job_counts(STATUSES)
        recent = self.store.job_finished_since(seconds)
        now = host_clock()
        queues = sorted({queue for queue, _ in counts} | set(first_due) | set(recent))
        return [
            {
                "queue": queue,
                **{status: counts.get((queue, status), 0) for status in STATUSES},
                "oldest_pending_seconds": (
                    None if first_due.get(queue) is None else (now - first_due[queue]).total_seconds()  # type: ignore[operator]
                ),
                "per_minute": recent.get(queue, 0) * 60.0 / seconds,
            }
            for queue in queues
        ]

    def close(self) -> None:
        self.database.dispose()

    def _ready(self) -> None:
        if not self._schema_checked:
            self.store.schema_check()
            self._schema_checked = True


class DeadLetters:
    """Jobs that used up their attempts or were discarded: inspect, retry, purge."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self, *, queue: str | None = None, limit: int = 100) -> list[Job]:
        return self._client.list_jobs(status=DEAD_LETTERED, queue=queue, limit=limit)

    def retry(self, job_id: int) -> bool:
        """Back to pending with fresh attempts; False if the job is not dead-lettered."""
        self._client._ready()
        return bool(self._client.store.job_retry_dead([_job_id(job_id)]))

    def retry_all(self) -> int:
        """Retry every dead letter; return how many."""
        self._client._ready()
        retried = 0
        while ids := self._client.store.job_finished_ids(DEAD_LETTERED):
            retried += len(self._client.store.job_retry_dead(ids))
        return retried

    def purge(self, *, older_than: object = None) -> int:
        """Delete dead letters (all, or those finished more than `older_than` ago)."""
        self._client._ready()
        age = None if older_than is None else parse_duration(older_than, what="older_than")
        purged = 0
        while ids := self._client.store.job_finished_ids(DEAD_LETTERED, older_than=age):
            purged += self._client.store.job_delete(ids, status=DEAD_LETTERED)
        return purged


def _new_job(
    name: str,
    payload: Any,
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_at: datetime | None = None,
    delay: object = None,
    max_attempts: int | None = None,
    timeout: object = None,
    unique_key: str | None = None,
    actor: str | None = None,
) -> NewJob:
    check_name(name, "job name")
    registered = lookup(name)
    if run_at is not None and delay is not None:
        raise BadInput("give run_at or delay, not both")
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise BadInput(f"run_at must be a datetime, not {type(run_at).__name__}")
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise BadInput("run_at is a naive datetime: pass a timezone-aware one, e.g. datetime(..., tzinfo=UTC)")
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int) or not -INT32 <= priority <= INT32
    ):
        raise BadInput(f"priority must be an int between {-INT32} and {INT32}, not {priority!r}")
    for text, what in ((unique_key, "unique_key"), (actor, "actor")):
        if text is not None and (not isinstance(text, str) or not 0 < len(text) <= 200):
            raise BadInput(f"{what} must be a string of 1-200 characters")
    return NewJob(
        name=name,
        queue=check_name(queue or (registered.queue if registered else DEFAULT_QUEUE), "queue"),
        payload=encode_payload(payload),
        priority=priority if priority is not None else (registered.priority if registered else 0),
        run_at=run_at,
        delay=0.0 if delay is None else parse_duration(delay, what="delay"),
        max_attempts=check_attempts(
            max_attempts
            if max_attempts is not None
            else (registered.max_attempts if registered else DEFAULT_MAX_ATTEMPTS)
        ),
        timeout=(
            parse_duration(timeout, what="timeout")
            if timeout is not None
            else (registered.timeout if registered else None)
        ),
        unique_key=unique_key,
        actor=actor,
    )


INT32, INT64 = 2**31 - 1, 2**63 - 1


def _job_id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -INT64 <= value <= INT64:
        raise BadInput(f"a job id is a whole number of at most 64 bits, not {value!r}")
    return value


def _limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadInput(f"limit must be a whole number of at least 1, not {value!r}")
    return value
