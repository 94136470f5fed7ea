"""What every part of the client shares: the store, building jobs from an application's
input, and recording operator actions in the audit trail.

**What is audited.** Every call of an operator method of the API records one row in
`jobsup_audit`, whoever calls it: the CLI, or an application (a web app's "cancel" button is
an operator action too). The methods: `Client.cancel`, `add_recurring`,
`enqueue_as_operator`, `dead_letters.retry` / `retry_all` / `purge`, `queues.pause` /
`resume`, `schedules.remove` / `set_enabled`, `calendars.add` / `remove`,
`workflows.cancel` / `retry`, `batches.cancel`, `breakers.reset`, `events.retry` /
`discard`. Each takes `actor=`; without it the actor is `jobsup.audit.default_actor()`
(``os:<user>``). What the worker and the supervisor do on their own (settling, retrying with
backoff, sweeping leases, firing schedules, retention) goes through the store, not these
methods, and is not audited. Bad input (a bad id, a queue no one knows) is refused before
anything is attempted and records nothing; an action that ran records its outcome: ``ok``,
``not_found`` (nothing matched: no such job, schedule, or paused queue) or ``refused`` (the
database's state forbade it, with the reason in `detail`).

**When.** A pause, a resume, a breaker reset and the parked events' retry and discard write
their row in their own transaction. The other actions write it right after their change has
committed (`ClientCore.audited`): they run through the store's transitions, which the worker
shares and which are one or many transactions (a retry-all or a purge works in batches), and
their outcome is known only once their compare-and-set has run. A process that dies in that
instant keeps the change and loses its row; a write that meets a dead pooled connection (the
first use of a pool after the database restarted) is tried once more; a row that still
cannot be written (the database went away) is logged as ``audit.failed`` with its fields,
rather than making a change that happened look failed.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from jobsup.checks import INT64, check_name
from jobsup.errors import BadInput, DatabaseError, DatabaseUnavailable
from jobsup.jobtypes import JobType
from jobsup.observe import tracing
from jobsup.observe.events import emit
from jobsup.paramcheck import check
from jobsup.store.audit import JOB_IDS_KEPT
from jobsup.store.builder import build
from jobsup.store.calendars import uses_calendar
from jobsup.store.database import Database
from jobsup.store.rows import NewJob
from jobsup.store.store import Store
from jobsup.workflow_spec import check_triggers


class ClientCore:
    """The store of one client, and what its parts share."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._store = Store(database)
        self._schema_checked = False

    @property
    def store(self) -> Store:
        """The client's calls reach the database through here, after checking their input
        and before they try anything: the first checks the schema (`SchemaOutdated`, and
        again at the next call until it passes), so no call half-runs against a missing or
        older schema."""
        if not self._schema_checked:
            self._store.schema_check()
            self._schema_checked = True
        return self._store

    # -- building jobs --------------------------------------------------------------------

    def build(
        self,
        name: object,
        payload: Any,
        options: Mapping[str, Any],
        allow_unknown: bool,
        links: Mapping[str, Any] | None = None,
    ) -> NewJob:
        """One new job, every check made: its name, its type's parameters, its triggers."""
        check_name(name, "job name")
        assert isinstance(name, str)
        jobtype = self.job_type(name, allow_unknown)
        self.check_triggers(options.get("then"), allow_unknown)
        new = build(jobtype, payload, options, links=links)
        new = self.store.calendars.apply([new], {name: jobtype})[0] if uses_calendar(jobtype) else new
        new.traceparent = tracing.traceparent()  # the caller's trace, for the worker's span
        return new

    def build_many(
        self, jobs: Iterable[Mapping[str, Any]], allow_unknown: bool, what: str, first: int = 0
    ) -> list[NewJob]:
        """New jobs from mappings with ``name``, ``payload`` and `enqueue`'s options; an
        error names the item (``jobs[3]: ...``; `first`: the place of the first, when `jobs`
        is a slice of the caller's list)."""
        news = []
        types: dict[object, JobType] = {}  # looked up once per name, not once per job
        for index, spec in enumerate(jobs, first):
            try:
                # A plain dict first: the ABC's isinstance costs a bulk enqueue 1 us a job.
                if (type(spec) is not dict and not isinstance(spec, Mapping)) or "name" not in spec:
                    raise BadInput("each job is a mapping with a 'name'")
                name = spec["name"]
                jobtype = types.get(name) if isinstance(name, str) else None
                if jobtype is None:
                    check_name(name, "job name")
                    jobtype = types[name] = self.job_type(name, allow_unknown)
                # Only name and payload (the common case) leave no options to collect.
                plain = len(spec) == 1 or (len(spec) == 2 and "payload" in spec)
                options = {} if plain else {k: v for k, v in spec.items() if k != "name" and k != "payload"}
                if options:
                    self.check_triggers(options.get("then"), allow_unknown)
                news.append(build(jobtype, spec.get("payload"), options))
            except BadInput as exc:
                raise type(exc)(f"{what}[{index}]: {exc}") from None
        if any(uses_calendar(jobtype) for jobtype in types.values()):
            news = self.store.calendars.apply(news, {jobtype.name: jobtype for jobtype in types.values()})
        if (traceparent := tracing.traceparent()) is not None:  # the caller's trace, for the worker's span
            for new in news:
                new.traceparent = traceparent
        return news

    def check_triggers(self, then: object, allow_unknown: bool) -> None:
        """A trigger's job must be one some instance defines: found now, not at the settle."""
        if then:
            for trigger in check_triggers(then):
                self.check_follow_up(trigger.job, trigger.payload, allow_unknown, "a trigger")

    def check_follow_up(
        self, name: str, payload: Any, allow_unknown: bool, what: str, added: Mapping[str, Any] | None = None
    ) -> None:
        """A job enqueued later from a payload stored now (a trigger's, a batch callback's,
        which gets `added` besides): it must fit the job's parameters, and it waits in
        clear, so it may not carry sensitive ones."""
        target = self.job_type(name, allow_unknown)
        if target.params is None:
            return
        if target.sensitive & set(payload or ()):
            raise BadInput(
                f"{what}'s payload is stored in clear until it is enqueued, so it cannot carry the sensitive "
                f"parameters of {name!r} ({', '.join(sorted(target.sensitive))})"
            )
        check(target.params, {**(payload or {}), **(added or {})}, job=name)

    def job_type(self, name: str, allow_unknown: bool) -> JobType:
        """This process's registration of `name`, else the published definition; with
        `allow_unknown`, defaults for a name neither knows."""
        if allow_unknown:  # the published definition if it can be read, else defaults: no check
            return self._store.resolver.settings_of(name)
        return self.store.resolver.require(name)

    # -- the audit trail ------------------------------------------------------------------

    def audited(
        self,
        actor: str,
        action: str,
        *,
        target: str | None = None,
        job_ids: Sequence[int] = (),
        job_count: int | None = None,
        outcome: str = "ok",
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Record an action that has already happened (see the module's docstring)."""
        record = functools.partial(
            self._store.audit.record,  # not `store`: the action ran, so the schema was checked
            actor,
            action,
            target=target,
            job_ids=job_ids,
            job_count=job_count,
            outcome=outcome,
            detail=detail,
        )
        try:
            try:
                record()
            except DatabaseUnavailable:
                # Once: after a restart of the database the first use of each pool fails on
                # a dead connection and renews the pool; the change was made on another.
                record()
        except DatabaseError as exc:
            emit(
                "audit.failed",
                actor=actor,
                action=action,
                target=target,
                outcome=outcome,
                job_count=len(job_ids) if job_count is None else job_count,
                job_ids=",".join(map(str, list(job_ids)[:JOB_IDS_KEPT])) or None,
                reason=str(exc),
            )


_collector = threading.Lock()
_pausing: list[bool] = []  # one entry per bulk enqueue under way; the first says if it was on


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while a bulk enqueue builds and inserts
    its jobs. Every job built (its row, its payload's text, their dicts and tuples) lives
    until the insert, so each pass the allocations set off walks them all and frees
    nothing: 40 % of the CPU of a 20,000-job `enqueue_many` on PostgreSQL (172 -> 99 ms in
    one process; holding it off for the build alone saves nothing, the passes come in the
    insert). The collector is the process's: overlapping bulk enqueues turn it on again
    when the last ends, and only if it was on when the first began; meanwhile the other
    threads, and with `AsyncClient` the event loop's other tasks during the insert's round
    trips, run without it (their garbage is collected after)."""
    with _collector:
        _pausing.append(gc.isenabled())
        gc.disable()
    try:
        yield
    finally:
        with _collector:
            was_on = _pausing[0]
            _pausing.pop()
            if not _pausing and was_on:
                gc.enable()


def row_id(value: object, what: str = "job") -> int:
    """`value` as the id of a job (a workflow, a batch): `BadInput` unless a whole number
    of at most 64 bits."""
    if isinstance(value, bool) or not isinstance(value, int) or not -INT64 <= value <= INT64:
        raise BadInput(f"a {what} id is a whole number of at most 64 bits, not {value!r}")
    return value


def found(done: bool) -> str:
    """The audit outcome of an action on one thing: ``ok``, or ``not_found``."""
    return "ok" if done else "not_found"
