"""The Python API: `Client` enqueues jobs, looks at them and cancels them; the rest of
jobsup's features are its parts, one attribute each (`client.workflows`, `client.batches`,
`client.schedules`, `client.calendars`, `client.queues`, `client.breakers`,
`client.workers`, `client.events`, `client.audit`, `client.dead_letters`), all on one
`ClientCore` (the store, building jobs, the audit trail)."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal, Unpack

from sqlalchemy import Connection

from jobsup.audit import actor_of
from jobsup.checks import INT64, check_limit, check_name
from jobsup.client.activity import last_hour
from jobsup.client.batches import Batches
from jobsup.client.bulk import enqueue_side_by_side
from jobsup.client.core import ClientCore, collector_paused, found, row_id
from jobsup.client.operations import AuditTrail, Breakers, DeadLetters, ParkedEvents, Queues, Workers
from jobsup.client.schedules import Calendars, Schedules, add_schedule
from jobsup.client.shapes import Hourly
from jobsup.client.waiting import Waiting, finished
from jobsup.client.workflows import Workflows
from jobsup.errors import BadInput
from jobsup.observe import subscribe_logs_and_metrics
from jobsup.store.builder import EnqueueOptions
from jobsup.store.database import Database
from jobsup.store.rows import Definition, Job, LogLine, RecurringSchedule
from jobsup.store.states import FILTERS
from jobsup.store.store import Store

SCAN_IDS = 50_000  # the ids a filtered page of the job list looks through, at most


def url_enabling_outbox(database_url: str | None) -> str:
    """`database_url`, else the configured one; and, when the settings name an events
    publisher, this process's transitions write the outbox from now on. The settings are
    read even for a given URL (an enqueue's event must not be lost for how its client was
    built), so a broken ``jobsup.toml`` raises its `ConfigurationError` here too."""
    from jobsup.settings import load

    settings = load()
    if settings.events_publisher:
        from jobsup.events import publishing

        publishing.enable()
    return settings.database_url if database_url is None else database_url


class Client:
    """A handle on one jobsup database.

    `database_url` defaults to the configured one (``JOBSUP_DATABASE_URL``, ``jobsup.toml``),
    else ``sqlite:///jobsup.db``. The schema must have been created with
    ``jobsup db upgrade`` (``jobsup start`` does it); a missing or older schema raises
    `SchemaOutdated` on first use.
    """

    def __init__(self, database_url: str | None = None, *, database: Database | None = None) -> None:
        # `database`: an already built one (`jobsup.AsyncClient` hands in its BoundDatabase).
        if database is not None and database_url is not None:
            raise BadInput("give a database URL or a database, not both")
        if database is None:
            database = Database(url_enabling_outbox(database_url))
        subscribe_logs_and_metrics()
        self._core = core = ClientCore(database)
        self.database = core.database
        self.workflows = Workflows(core)
        self.batches = Batches(core)
        self.schedules = Schedules(core)
        self.calendars = Calendars(core)
        self.queues = Queues(core)
        self.breakers = Breakers(core)
        self.workers = Workers(core)
        self.events = ParkedEvents(core)
        self.audit = AuditTrail(core)
        self.dead_letters = DeadLetters(core, self.list_jobs)

    def enqueue(
        self,
        name: str,
        payload: Any = None,
        *,
        connection: Connection | None = None,
        allow_unknown: bool = False,
        **options: Unpack[EnqueueOptions],
    ) -> int:
        """Store a job and return its id.

        Options (see `EnqueueOptions`): `queue`, `priority`, `run_at` (timezone-aware) or
        `delay` (a duration from now), `max_attempts`, `timeout`, `unique_key` (while a job
        with that key is pending or running, its id is returned instead), `actor`. Those not
        given come from the job type: this process's registration, else the definition the
        workers published. A name neither knows raises `UnknownJob`, unless `allow_unknown`.
        With `connection` (your SQLAlchemy Connection) the job is written in your
        transaction and commits or rolls back with it."""
        return self._enqueue(name, payload, connection, allow_unknown, options)[0]

    def enqueue_as_operator(
        self, name: str, payload: Any = None, *, actor: str, allow_unknown: bool = False, **options: Any
    ) -> int:
        """`enqueue` on an operator's behalf (the CLI, the HTTP API), audited as
        ``job.enqueue``, unlike an application's; ``unchanged`` when a live job's unique key
        meant nothing was added."""
        job_id, new = self._enqueue(name, payload, None, allow_unknown, {**options, "actor": actor})
        self._core.audited(actor, "job.enqueue", target=name, job_ids=[job_id], outcome="ok" if new else "unchanged")
        return job_id

    def _enqueue(
        self, name: str, payload: Any, connection: Connection | None, allow_unknown: bool, options: Mapping[str, Any]
    ) -> tuple[int, bool]:
        """`enqueue`, and whether the job is new (not a live one's unique key)."""
        new = self._core.build(name, payload, options, allow_unknown)
        inserted: list[int] = []
        return self.store.transitions.enqueue([new], connection=connection, inserted=inserted)[0], bool(inserted)

    def enqueue_many(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        connection: Connection | None = None,
        allow_unknown: bool = False,
    ) -> list[int]:
        """Store many jobs in one round trip per batch; each is a mapping with ``name``,
        ``payload`` and the options of `enqueue`. All are checked before any is committed: a
        bad one leaves none written. Python's garbage collector is held off meanwhile
        (`collector_paused`). On PostgreSQL a long list is built and inserted side by side
        (`jobsup.client.bulk`)."""
        with collector_paused():
            chunk = self.database.dialect.bulk_chunk  # not self.store: no round trip before the checks
            if connection is None and chunk:
                jobs = jobs if isinstance(jobs, list | tuple) else list(jobs)  # sliced by the builder
                if len(jobs) > chunk:
                    return enqueue_side_by_side(self._core, jobs, allow_unknown, chunk)
            news = self._core.build_many(jobs, allow_unknown, "jobs")
            if not news:
                return []
            return self.store.transitions.enqueue(news, connection=connection)

    def get(self, job_id: int) -> Job | None:
        """The job with its attempt history and result, or None if there is no such job."""
        job_id = row_id(job_id)
        return self.store.reads.job_get(job_id)

    def wait(self, job_id: int, timeout: float | str | timedelta | None = None) -> Job:
        """The job once it has finished (succeeded, dead-lettered or cancelled), with its
        history and result. `timeout` (seconds, or a duration such as ``"30s"``; None: no
        end) passed first, it raises `WaitTimeout`, which holds the job as last seen; no such
        job raises `JobNotFound`. It reads the job's row again after pauses that grow from
        10 ms to 250 ms (`jobsup.client.waiting`)."""
        waiting = Waiting(row_id(job_id), timeout)
        while not finished(job := waiting.seen(self.get(job_id))):
            time.sleep(waiting.next_pause(job))
        return job

    def logs(self, job_id: int, *, after_id: int | None = None, limit: int = 1000) -> list[LogLine]:
        """What the job logged through `ctx.log`, oldest first, at most `limit` lines: those
        after the line `after_id` (the last `id` you read), to page or to follow."""
        job_id, limit = row_id(job_id), check_limit(limit)
        after = None if after_id is None else row_id(after_id)
        return self.store.logs.read(job_id, after_id=after, limit=limit)

    def cancel(self, job_id: int, *, actor: str | None = None) -> bool:
        """Cancel a pending or running job; False if it had already finished or does not
        exist. Audited (`actor`: who, by default the OS user; see `jobsup.client.core`)."""
        job_id, who = row_id(job_id), actor_of(actor)
        cancelled = self.store.transitions.cancel(job_id)
        self._core.audited(who, "job.cancel", job_ids=[job_id], job_count=int(cancelled), outcome=found(cancelled))
        return cancelled

    def rerun(self, job_id: int, *, actor: str | None = None) -> int:
        """A new job made from the finished job `job_id` (succeeded, dead-lettered or
        cancelled), linked to it (`Job.rerun_of`, and the old one's `reruns`); its id.
        Built from the stored row, so sealed values stay sealed (see `jobsup.client.reruns`).
        `JobNotFound` for no such job, `BadInput` for one not finished. Audited (`job.rerun`)."""
        from jobsup.client.reruns import rerun

        return rerun(self._core, row_id(job_id), actor)

    def list_jobs(
        self, *, status: str | None = None, queue: str | None = None, limit: int = 100, sla_breached: bool = False
    ) -> list[Job]:
        """Jobs, newest first, without their history (use `get` for that); with
        `sla_breached`, only those maintenance marked past an SLA deadline. `status` is a
        status or ``retrying``/``scheduled`` (pending ones, `jobsup.store.states`)."""
        if status is not None and status not in FILTERS:
            raise BadInput(f"status {status!r} is not one of {', '.join(FILTERS)}")
        limit = check_limit(limit)
        return self.store.reads.job_list(status=status, queue=queue, limit=limit, sla_breached=bool(sla_breached))

    def jobs_page(
        self,
        *,
        status: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[Job], str | None]:
        """One page of jobs, newest first, and the cursor of the next page (None at the
        end): `list_jobs` for a screen, as the HTTP API and the dashboard page. A filtered
        page looks through `SCAN_IDS` ids at most, so it may hold fewer than `limit` jobs,
        or none, while a cursor says older ones may follow. A cursor only continues the
        query that made it: given with other filters, or not one made here, it raises
        `BadInput`. It is not signed: it carries nothing but the last id and the filters'
        fingerprint, and a hand-made one can only start a page at another id."""
        if status is not None and status not in FILTERS:
            raise BadInput(f"status {status!r} is not one of {', '.join(FILTERS)}")
        for value, what in ((queue, "queue"), (name, "job name")):
            if value is not None:
                check_name(value, what)
        limit = check_limit(limit)
        query = _fingerprint(status, queue, name)
        before = None if cursor is None else _open_cursor(cursor, query)
        reads = self.store.overview
        if status is None and queue is None and name is None:  # the primary key's order: no scan
            listed = reads.job_page(before=before, limit=limit + 1)
            page = listed[:limit]
            return page, (_make_cursor(page[-1].id, query) if len(listed) > limit and page else None)
        # A filter no index orders by id would scan back through every older job for a rare
        # match: each page looks at SCAN_IDS ids at most, and a page that found fewer than
        # `limit` there hands on a cursor to the stretch below it.
        ends = reads.id_range()
        if ends is None:
            return [], None
        top = min(before, ends[1] + 1) if before is not None else ends[1] + 1
        lowest = max(top - SCAN_IDS, ends[0])
        listed = reads.job_page(before=top, lowest=lowest, limit=limit + 1, status=status, queue=queue, name=name)
        page = listed[:limit]
        if len(listed) > limit and page:
            return page, _make_cursor(page[-1].id, query)
        return page, (_make_cursor(lowest, query) if lowest > ends[0] else None)

    def definitions(self) -> list[Definition]:
        """Every published job type, with who declared it and any disagreement."""
        return self.store.definitions.list()

    def last_hour(self, *, by: Literal["queue", "job"] = "queue", now: datetime | None = None) -> dict[str, Hourly]:
        """Throughput and latency over the last hour, in twelve five-minute buckets, per
        queue or per job type (`by="job"`); one with nothing finished in the hour is left out."""
        if by not in ("queue", "job"):
            raise BadInput(f"by must be 'queue' or 'job', not {by!r}")
        return last_hour(self.store, by=by, now=now)

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
        overlap: str = "allow",
        calendar: str | None = None,
        calendar_mode: str = "blackout",
        calendar_policy: str = "skip",
        allow_unknown: bool = False,
        actor: str | None = None,
    ) -> RecurringSchedule:
        """Add or update the schedule `name`: run `job` with `payload` at each `cron` slot in
        `timezone`. Safe to call at every startup on every instance: the same cron keeps
        its next run, a changed one starts from now. Listed, removed, paused and resumed
        through `client.schedules`.

        `overlap`: what a slot does while the schedule's previous job is still waiting,
        pending or running: ``allow`` (fire anyway), ``skip`` (not fired; counted) or
        ``queue`` (fired once that job has finished). `calendar` names a calendar
        (`client.calendars.add`); with `calendar_mode` ``blackout`` a slot inside it, with
        ``allowed`` a slot outside it, is skipped (`calendar_policy` ``skip``) or fired to
        run at the end of the window (``defer_to_end``).

        A bad cron, time zone, option or an unknown calendar raises `BadInput`, an unknown
        job `UnknownJob` (unless `allow_unknown`), and nothing is written. Audited."""
        return add_schedule(
            self._core,
            name,
            job=job,
            cron=cron,
            payload=payload,
            queue=queue,
            timezone=timezone,
            priority=priority,
            how=(overlap, calendar, calendar_mode, calendar_policy),
            allow_unknown=allow_unknown,
            actor=actor,
        )

    @property
    def store(self) -> Store:
        """The tables of this client's database (for jobsup's own CLI and tests); its schema
        checked at the first use."""
        return self._core.store

    def close(self) -> None:
        self.database.dispose()


def _fingerprint(status: str | None, queue: str | None, name: str | None) -> str:
    text = json.dumps([status, queue, name])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _make_cursor(last_id: int, query: str) -> str:
    raw = json.dumps({"before": last_id, "query": query}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _open_cursor(cursor: object, query: str) -> int:
    if not isinstance(cursor, str) or len(cursor) > 200:
        raise BadInput("cursor is not one this API made")
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        before, made_for = data["before"], data["query"]
    except (ValueError, TypeError, KeyError):
        raise BadInput("cursor is not one this API made") from None
    if made_for != query:
        raise BadInput("cursor belongs to another query (other filters): start again without it")
    if isinstance(before, bool) or not isinstance(before, int) or not 0 < before <= INT64:
        raise BadInput("cursor is not one this API made")
    return before


__all__ = ["Client", "url_enabling_outbox"]
