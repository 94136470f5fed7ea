"""Published job definitions: every statement about `jobsup_job_definition`, written once.

A process that registers job types publishes them (`publish`): `jobsup start` at boot, and
`jobsup definitions sync --app MODULE` as a deploy step. The newest declaration wins; when
it differs from the one it replaces and that one came from another instance, the replaced
one is kept as the row's `disagreement`, so two deployments that declare one name
differently are visible (`jobsup definitions list`) instead of flapping silently. A
disagreement is forgotten once nobody has repeated it for `FORGET_AFTER`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, insert, select, update

from jobsup import retention
from jobsup.clock import host_clock
from jobsup.errors import ConstraintViolation
from jobsup.jobtypes import JobType, RetryPolicy
from jobsup.paramcheck import problems
from jobsup.policies import Limits
from jobsup.store.database import Database
from jobsup.store.rows import Definition
from jobsup.store.schema import UNFINISHED_STATUSES, job, job_definition

FORGET_AFTER = timedelta(days=1)
SCAN = 10_000  # unfinished jobs of one type a deploy's compatibility check reads


class Definitions:
    def __init__(self, db: Database) -> None:
        self.db = db

    def publish(self, types: Sequence[JobType], *, instance: str, now: datetime | None = None) -> list[str]:
        """Declare `types` as `instance`'s; return the names whose settings changed."""
        at = now or host_clock()
        existing = {d.name: d for d in self.list()}
        changed = []
        for jobtype in types:
            settings = jobtype.settings()
            current = existing.get(jobtype.name)
            if current is None and self._insert(jobtype, settings, instance, at):
                changed.append(jobtype.name)
                continue
            current = current or self.get(jobtype.name)
            assert current is not None
            same = _settings(current) == settings
            disagreement = current.disagreement
            if not same and current.declared_by != instance:
                disagreement = {"by": current.declared_by, "at": _iso(current.declared_at), **_settings(current)}
            elif disagreement is not None and _older_than(disagreement.get("at"), at - FORGET_AFTER):
                disagreement = None
            values = {**_columns(settings), "declared_by": instance, "declared_at": at}
            values["disagreement"] = None if disagreement is None else json.dumps(disagreement)
            with self.db.statement("definitions") as conn:
                conn.execute(update(job_definition).where(job_definition.c.name == jobtype.name).values(values))
            if not same:
                changed.append(jobtype.name)
        return changed

    def _insert(self, jobtype: JobType, settings: dict[str, Any], instance: str, at: datetime) -> bool:
        values = {**_columns(settings), "declared_by": instance, "declared_at": at, "first_seen_at": at}
        try:
            with self.db.statement("definitions") as conn:
                conn.execute(insert(job_definition).values(name=jobtype.name, **values))
        except ConstraintViolation:
            return False  # another instance published it first: update theirs
        return True

    def get(self, name: str) -> Definition | None:
        with self.db.read("definitions") as conn:
            row = conn.execute(select(job_definition).where(job_definition.c.name == name)).first()
        return None if row is None else _definition(row)

    def list(self) -> list[Definition]:
        with self.db.read("definitions") as conn:
            rows = conn.execute(select(job_definition).order_by(job_definition.c.name)).all()
        return [_definition(row) for row in rows]

    def own_retention(self) -> dict[str, dict[str, float | None]]:
        """The job types with their own retention (`jobsup.retention`): by end state, each
        such type's age in seconds (None: forever). A small read of a small table, made by the
        retention purge each time it runs, so a deploy's new ages apply from its next run."""
        with self.db.read("definitions") as conn:
            rows = conn.execute(
                select(job_definition.c.name, job_definition.c.retain).where(job_definition.c.retain.is_not(None))
            ).all()
        ages: dict[str, dict[str, float | None]] = {}
        for row in rows:
            for state, age in (retention.load(_json(row.retain)) or {}).items():
                ages.setdefault(state, {})[row.name] = age
        return ages

    def incompatible(self, types: Sequence[JobType]) -> dict[str, tuple[int, Counter[str]]]:
        """For each of `types` whose parameters differ from the published ones: how many of
        its unfinished jobs (of the first `SCAN`) do not fit the new parameters, and why, by
        reason. Run before publishing, so a deploy that removes or retypes a parameter while
        jobs of the old shape wait says so instead of failing them one by one later."""
        published = {d.name: d for d in self.list()}
        found: dict[str, tuple[int, Counter[str]]] = {}
        for jobtype in types:
            before = published.get(jobtype.name)
            if jobtype.params is None or before is None or before.params == jobtype.params:
                continue
            with self.db.read("definitions") as conn:
                payloads = conn.execute(
                    select(job.c.payload)
                    .where(job.c.name == jobtype.name, job.c.status.in_(UNFINISHED_STATUSES))
                    .limit(SCAN)
                ).scalars()
                misfits = [reasons for text in payloads if (reasons := _misfits(jobtype, text))]
            if misfits:
                found[jobtype.name] = (len(misfits), Counter(reason for reasons in misfits for reason in reasons))
        return found

    def load(self) -> dict[str, JobType]:
        """Every published job type, for `jobsup.jobtypes.Resolver`."""
        return {d.name: as_jobtype(d) for d in self.list()}


def sensitive_fields(conn: Connection, names: set[str]) -> dict[str, frozenset[str]]:
    """The sensitive fields of the job types `names`, as published now (a read path masks
    them even in rows written before they were marked)."""
    if not names:
        return {}
    rows = conn.execute(
        select(job_definition.c.name, job_definition.c.params).where(job_definition.c.name.in_(sorted(names)))
    ).all()
    found = {}
    for row in rows:
        try:
            params = json.loads(row.params) if row.params else None
        except ValueError:
            continue  # a hand-edited row: read paths still mask every sealed value
        fields = JobType(row.name, params=params if isinstance(params, dict) else None).sensitive
        if fields:
            found[row.name] = fields
    return found


def _misfits(jobtype: JobType, text: str) -> list[str]:
    assert jobtype.params is not None
    try:
        payload = json.loads(text)
    except ValueError:
        return ["the stored payload is not JSON"]
    return problems(jobtype.params, payload, job=jobtype.name)


def as_jobtype(definition: Definition) -> JobType:
    return JobType(
        definition.name,
        definition.queue,
        definition.priority,
        definition.max_attempts,
        definition.timeout,
        RetryPolicy.from_description(definition.retry),
        _triggers(definition.triggers),
        definition.params if isinstance(definition.params, dict) else None,
        Limits.load(definition.limits) or None,
        retention.load(definition.retain),
    )


def _triggers(described: list[dict[str, Any]] | None) -> tuple[Any, ...]:
    from jobsup.errors import BadInput
    from jobsup.workflow_spec import Trigger

    triggers = []
    for item in described or ():
        try:
            triggers.append(Trigger(item["job"], item.get("on", "any"), item.get("payload"), item.get("queue")))
        except (BadInput, KeyError, TypeError):
            continue  # a hand-edited row: that trigger is left out rather than every enqueue failing
    return tuple(triggers)


def _columns(settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "queue": settings["queue"],
        "priority": settings["priority"],
        "max_attempts": settings["max_attempts"],
        "timeout": settings["timeout"],
        "retry_policy": json.dumps(settings["retry"], sort_keys=True),
        "triggers": json.dumps(settings["then"]) if settings.get("then") else None,
        "params": json.dumps(settings["params"], sort_keys=True) if settings.get("params") is not None else None,
        "limits": json.dumps(settings["limits"], sort_keys=True) if settings.get("limits") else None,
        "retain": json.dumps(settings["retain"], sort_keys=True) if settings.get("retain") else None,
    }


def _settings(definition: Definition) -> dict[str, Any]:
    settings = {
        "queue": definition.queue,
        "priority": definition.priority,
        "max_attempts": definition.max_attempts,
        "timeout": definition.timeout,
        "retry": definition.retry,
    }
    if definition.triggers:
        settings["then"] = definition.triggers
    if definition.params is not None:
        settings["params"] = definition.params
    if definition.limits:
        settings["limits"] = definition.limits
    if definition.retain:
        settings["retain"] = definition.retain
    return settings


def _definition(row: Any) -> Definition:
    return Definition(
        name=row.name,
        queue=row.queue,
        priority=row.priority,
        max_attempts=row.max_attempts,
        timeout=row.timeout,
        retry=_json(row.retry_policy) or {},
        declared_by=row.declared_by,
        declared_at=row.declared_at,
        first_seen_at=row.first_seen_at,
        disagreement=_json(row.disagreement),
        triggers=_json(row.triggers),
        params=_json(row.params),
        limits=_json(row.limits),
        retain=_json(row.retain),
    )


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None  # a hand-edited row: treated as absent rather than breaking every read


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _older_than(text: object, cutoff: datetime) -> bool:
    try:
        return isinstance(text, str) and datetime.fromisoformat(text) < cutoff
    except ValueError:
        return True
