"""The Python API: enqueue jobs, look at them, cancel them, and handle dead letters."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Unpack

from sqlalchemy import Connection

from jobsup.audit import actor_of
from jobsup.checks import check_limit, check_name
from jobsup.client_groups import GroupsAPI
from jobsup.client_ops import OpsAPI
from jobsup.client_overview import OverviewAPI
from jobsup.client_schedules import SchedulesAPI
from jobsup.durations import parse_duration
from jobsup.errors import BadInput, DuplicateJob
from jobsup.jobtypes import JobType
from jobsup.observe import subscribe_logs_and_metrics, tracing
from jobsup.observe.events import emit
from jobsup.paramcheck import check
from jobsup.store import Database, Store
from jobsup.store.builder import EnqueueOptions, build
from jobsup.store.calendars import uses_calendar
from jobsup.store.rows import Definition, Job, LogLine, NewJob
from jobsup.store.schema import DEAD_LETTERED, STATUSES
from jobsup.workflow_spec import check_triggers

INT64 = 2**63 - 1


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


class Client(GroupsAPI, OpsAPI, OverviewAPI, SchedulesAPI):
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
        self.database = database
        self.store = Store(self.database)
        self.dead_letters = DeadLetters(self)
        self._schema_checked = False

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

    def _enqueue(
        self, name: str, payload: Any, connection: Connection | None, allow_unknown: bool, options: Mapping[str, Any]
    ) -> tuple[int, bool]:
        """`enqueue`, and whether the job is new (not a live one's unique key)."""
        new = self._build(name, payload, options, allow_unknown)
        self._ready()
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
        ``payload`` and the options of `enqueue`. All are checked before any is written."""
        news = self._build_many(jobs, allow_unknown, "jobs")
        if not news:
            return []
        self._ready()
        return self.store.transitions.enqueue(news, connection=connection)

    def _build_many(self, jobs: Iterable[Mapping[str, Any]], allow_unknown: bool, what: str) -> list[NewJob]:
        news = []
        types: dict[object, JobType] = {}  # looked up once per name, not once per job
        for index, spec in enumerate(jobs):
            try:
                if not isinstance(spec, Mapping) or "name" not in spec:
                    raise BadInput("each job is a mapping with a 'name'")
                name = spec["name"]
                jobtype = types.get(name) if isinstance(name, str) else None
                if jobtype is None:
                    check_name(name, "job name")
                    jobtype = types[name] = self._job_type(name, allow_unknown)
                options = {key: value for key, value in spec.items() if key != "name" and key != "payload"}
                if options:
                    self._check_triggers(options.get("then"), allow_unknown)
                news.append(build(jobtype, spec.get("payload"), options))
            except BadInput as exc:
                raise type(exc)(f"{what}[{index}]: {exc}") from None
        if any(uses_calendar(jobtype) for jobtype in types.values()):
            news = self.store.calendars.apply(news, {jobtype.name: jobtype for jobtype in types.values()})
        if (traceparent := tracing.traceparent()) is not None:  # the caller's trace, for the worker's span
            for new in news:
                new.traceparent = traceparent
        return news

    def _build(
        self,
        name: object,
        payload: Any,
        options: Mapping[str, Any],
        allow_unknown: bool,
        links: Mapping[str, Any] | None = None,
    ) -> NewJob:
        check_name(name, "job name")
        assert isinstance(name, str)
        jobtype = self._job_type(name, allow_unknown)
        self._check_triggers(options.get("then"), allow_unknown)
        new = build(jobtype, payload, options, links=links)
        new = self.store.calendars.apply([new], {name: jobtype})[0] if uses_calendar(jobtype) else new
        new.traceparent = tracing.traceparent()  # the caller's trace, for the worker's span
        return new

    def _check_triggers(self, then: object, allow_unknown: bool) -> None:
        """A trigger's job must be one some instance defines: found now, not at the settle."""
        if then:
            for trigger in check_triggers(then):
                self._check_follow_up(trigger.job, trigger.payload, allow_unknown, "a trigger")

    def _check_follow_up(
        self, name: str, payload: Any, allow_unknown: bool, what: str, added: Mapping[str, Any] | None = None
    ) -> None:
        """A job enqueued later from a payload stored now (a trigger's, a batch callback's,
        which gets `added` besides): it must fit the job's parameters, and it waits in
        clear, so it may not carry sensitive ones."""
        target = self._job_type(name, allow_unknown)
        if target.params is None:
            return
        if target.sensitive & set(payload or ()):
            raise BadInput(
                f"{what}'s payload is stored in clear until it is enqueued, so it cannot carry the sensitive "
                f"parameters of {name!r} ({', '.join(sorted(target.sensitive))})"
            )
        check(target.params, {**(payload or {}), **(added or {})}, job=name)

    def _job_type(self, name: str, allow_unknown: bool) -> JobType:
        if allow_unknown:
            return self.store.resolver.settings_of(name)
        self._ready()
        return self.store.resolver.require(name)

    def get(self, job_id: int) -> Job | None:
        """The job with its attempt history and result, or None if there is no such job."""
        self._ready()
        return self.store.reads.job_get(_job_id(job_id))

    def logs(self, job_id: int, *, after_id: int | None = None, limit: int = 1000) -> list[LogLine]:
        """What the job logged through `ctx.log`, oldest first, at most `limit` lines: those
        after the line `after_id` (the last `id` you read), to page or to follow."""
        self._ready()
        after = None if after_id is None else _job_id(after_id)
        return self.store.logs.read(_job_id(job_id), after_id=after, limit=check_limit(limit))

    def cancel(self, job_id: int, *, actor: str | None = None) -> bool:
        """Cancel a pending or running job; False if it had already finished or does not
        exist. Audited (`actor`: who, by default the OS user; see `jobsup.client_ops`)."""
        job_id, who = _job_id(job_id), actor_of(actor)
        self._ready()
        cancelled = self.store.transitions.cancel(job_id)
        self._audit(who, "job.cancel", job_ids=[job_id], job_count=int(cancelled), outcome=_found(cancelled))
        return cancelled

    def list_jobs(
        self, *, status: str | None = None, queue: str | None = None, limit: int = 100, sla_breached: bool = False
    ) -> list[Job]:
        """Jobs, newest first, without their history (use `get` for that); with
        `sla_breached`, only those maintenance marked past an SLA deadline."""
        if status is not None and status not in STATUSES:
            raise BadInput(f"status {status!r} is not one of {', '.join(STATUSES)}")
        self._ready()
        found = self.store.reads.job_list
        return found(status=status, queue=queue, limit=check_limit(limit), sla_breached=bool(sla_breached))

    def definitions(self) -> list[Definition]:
        """Every published job type, with who declared it and any disagreement."""
        self._ready()
        return self.store.definitions.list()

    # -- recurring schedules ------------------------------------------------------------

    # -- operations ---------------------------------------------------------------------

    def workers(self) -> list[dict[str, Any]]:
        """Every registered supervisor and worker, with the job each worker holds."""
        self._ready()
        held = self.store.reads.job_held_by()
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
            for row in self.store.processes.process_list()
        ]

    def stats(self, *, window: object = "5m") -> list[dict[str, Any]]:
        """Per queue: counts by status, the oldest due pending job's age, and successes per
        minute over the last `window`."""
        from jobsup.clock import host_clock

        seconds = parse_duration(window, what="window")
        if seconds <= 0:
            raise BadInput("window must be longer than zero")
        self._ready()
        counts, first_due = self.store.reads.job_counts(STATUSES)
        recent = self.store.reads.job_finished_since(seconds)
        now = host_clock()
        queues = sorted({queue for queue, _ in counts} | set(first_due) | set(recent))
        rows = []
        for queue in queues:
            due = first_due.get(queue)
            rows.append(
                {
                    "queue": queue,
                    **{status: counts.get((queue, status), 0) for status in STATUSES},
                    "oldest_pending_seconds": None if due is None else (now - due).total_seconds(),
                    "per_minute": recent.get(queue, 0) * 60.0 / seconds,
                }
            )
        return rows

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

    def retry(self, job_id: int, *, actor: str | None = None) -> bool:
        """Back to pending with a fresh budget of attempts; False if the job is not
        dead-lettered. Attempt numbers go on from where they were. Audited."""
        job_id, who = _job_id(job_id), actor_of(actor)
        self._client._ready()
        try:
            retried = bool(self._client.store.transitions.retry([job_id]))
        except DuplicateJob as exc:
            self._client._audit(who, "dead.retry", job_ids=[job_id], job_count=0, outcome="refused", detail=_why(exc))
            raise
        self._client._audit(who, "dead.retry", job_ids=[job_id], job_count=int(retried), outcome=_found(retried))
        return retried

    def retry_all(self, *, actor: str | None = None) -> int:
        """Retry every dead letter; return how many. One whose unique key a live job holds
        is left dead-lettered (and said so in the log), and the others are still retried.
        Audited as one row: the count, the first ids, how many were skipped."""
        store, who = self._client.store, actor_of(actor)
        self._client._ready()
        retried: list[int] = []
        skipped, after, outcome = 0, None, "failed"
        try:
            while ids := store.reads.job_ids_after(DEAD_LETTERED, after):
                for job_id in ids:
                    try:
                        retried += store.transitions.retry([job_id])
                    except DuplicateJob as exc:
                        skipped += 1
                        emit("dead_letter.retry_skipped", job=job_id, reason=str(exc))
                after = ids[-1]
            outcome = "ok"
        finally:  # what was retried before an error stopped it is recorded too
            detail = {"skipped": skipped} if skipped else None
            self._client._audit(
                who, "dead.retry_all", job_ids=retried, job_count=len(retried), outcome=outcome, detail=detail
            )
        return len(retried)

    def purge(self, *, older_than: object = None, actor: str | None = None) -> int:
        """Delete dead letters (all, or those finished more than `older_than` ago). Audited
        as one row: the count and the first ids."""
        age = None if older_than is None else parse_duration(older_than, what="older_than")
        who = actor_of(actor)
        self._client._ready()
        first: list[int] = []
        detail = None if age is None else {"older_than_seconds": age}
        try:
            purged = self._client.store.retention.purge(DEAD_LETTERED, older_than=age, first_ids=first)
        except BaseException:  # stopped part way: what was deleted by then is recorded (its count is not known)
            self._client._audit(who, "dead.purge", job_ids=first, outcome="failed", detail=detail)
            raise
        self._client._audit(who, "dead.purge", job_ids=first, job_count=purged, detail=detail)
        return purged


def _job_id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -INT64 <= value <= INT64:
        raise BadInput(f"a job id is a whole number of at most 64 bits, not {value!r}")
    return value


def _found(done: bool) -> str:
    return "ok" if done else "not_found"


def _why(exc: Exception) -> dict[str, str]:
    return {"reason": str(exc)}
