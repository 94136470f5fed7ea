"""The jobsup tables as SQLAlchemy Core metadata: the one description of the schema.

Alembic revisions in `jobsup.migrations` create exactly this (a test compares them). The
filtered indexes are what keep claims fast however many finished rows pile up: the claim
index holds pending rows only, the lease index running rows only.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ColumnElement,
    Identity,
    Index,
    Integer,
    MetaData,
    Table,
    literal_column,
)

from jobsup.store.dialects.types import LongText, Name, Seconds, UTCDateTime

# Job statuses and attempt outcomes, as stored.
WAITING, PENDING, RUNNING = "waiting", "pending", "running"
SUCCEEDED, DEAD_LETTERED, CANCELLED = "succeeded", "dead_lettered", "cancelled"
STATUSES = (WAITING, PENDING, RUNNING, SUCCEEDED, DEAD_LETTERED, CANCELLED)
LIVE_STATUSES = (PENDING, RUNNING)  # what a unique key is held by
UNFINISHED_STATUSES = (WAITING, PENDING, RUNNING)
BREAKER_STATES = ("closed", "half_open", "open")  # a circuit breaker's (`jobsup.store.breakers`), in the gauge's order
FINISHED_STATUSES = (SUCCEEDED, DEAD_LETTERED, CANCELLED)
OUTCOMES = ("succeeded", "failed", "timed_out", "lease_expired", "released", "cancelled")

# Bumped with every Alembic revision; a test checks it equals the migrations' head.
SCHEMA_REVISION = "0018"
VERSION_TABLE = "jobsup_alembic_version"

metadata = MetaData()

# SQLite only auto-assigns ids to an INTEGER PRIMARY KEY (the rowid), not to BIGINT.
_ID = BigInteger().with_variant(Integer(), "sqlite")
_NAME = Name(200)

job = Table(
    "jobsup_job",
    metadata,
    Column("id", _ID, Identity(), primary_key=True),
    Column("name", _NAME, nullable=False),
    Column("queue", _NAME, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("payload", LongText, nullable=False),
    Column("status", Name(20), nullable=False),
    Column("run_at", UTCDateTime, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("lease_owner", _NAME),
    Column("lease_expires_at", UTCDateTime),
    Column("last_error", LongText),
    Column("unique_key", _NAME),
    Column("actor", _NAME),
    Column("recurring_name", _NAME),
    Column("scheduled_slot", UTCDateTime),
    Column("timeout", Seconds),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime),
    Column("result", LongText),
    # Attempts a dead-letter retry grants; None: max_attempts (a job never retried).
    Column("budget", Integer),
    # Links to other jobs (all null for a plain job; see `jobsup.store.steps`): the workflow
    # and step this job is, the batch it is a child of, the job whose trigger or batch
    # enqueued it, how many of its dependencies have not finished (and how many of those
    # that did failed), what it does when one failed, and the follow-ups it triggers.
    Column("workflow_id", BigInteger),
    Column("step", _NAME),
    Column("batch_id", BigInteger),
    Column("parent_id", BigInteger),
    Column("waiting_on", Integer),
    Column("failed_deps", Integer),
    Column("on_failure", Name(10)),
    Column("triggers", LongText),  # JSON: [{"job", "on", "payload", "queue"}]
    Column("key_id", Name(64)),  # the key its sensitive values are sealed with (`jobsup.secrets`)
    # Flow control (`jobsup.store.concurrency_keys`): null for a job that uses none of it.
    Column("concurrency_key", _NAME),
    Column("concurrency_limit", Integer),  # copied from the job type's policy at enqueue
    Column("sla_start_by", UTCDateTime),
    Column("sla_finish_by", UTCDateTime),
    Column("sla_breached_at", UTCDateTime),
    Column("rate_turn", UTCDateTime),  # the start time a rate window gave a job it put back
    Column("traceparent", Name(55)),  # the enqueuer's W3C trace context (`jobsup.observe.tracing`)
    # An operator cancelled it while it ran: its end, when its worker writes it, is `cancelled`.
    Column("cancel_requested_at", UTCDateTime),
    Column("rerun_of", BigInteger),  # the finished job it was made again from (`jobsup jobs rerun`)
    Column("started_at", UTCDateTime),  # the attempt under way (or the last); its row is written at its end
    Column("progress", LongText),  # JSON: what it last reported (`ctx.set_progress`)
    # SQLite would otherwise hand the id of a purged newest job to the next one.
    sqlite_autoincrement=True,
)

# A row per ended attempt (`write_attempts`); a surrogate key: a release's number comes back.
job_attempt = Table(
    "jobsup_job_attempt",
    metadata,
    Column("id", _ID, Identity(), primary_key=True),
    Column("job_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("owner", _NAME, nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime),
    Column("outcome", Name(20)),
    Column("error", LongText),
    Column("progress", LongText),  # JSON: what the attempt last reported (`ctx.set_progress`)
    Column("traceback", LongText),  # JSON: a failure's frames (`jobsup.worker.frames`)
)

recurring_job = Table(
    "jobsup_recurring_job",
    metadata,
    Column("name", _NAME, primary_key=True),
    Column("job_name", _NAME, nullable=False),
    Column("cron", Name(100), nullable=False),
    Column("timezone", Name(64), nullable=False),
    Column("payload", LongText, nullable=False),
    Column("queue", _NAME, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("next_run_at", UTCDateTime, nullable=False),
    Column("last_fired_at", UTCDateTime),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("key_id", Name(64)),  # the key its payload's sensitive values are sealed with
    Column("overlap", Name(10)),  # skip | allow | queue; null: allow
    Column("calendar", _NAME),
    Column("calendar_mode", Name(20)),  # blackout | allowed
    Column("calendar_policy", Name(20)),  # skip | defer_to_end
    Column("skipped", Integer),  # slots not fired (overlap, calendar)
    Column("last_skipped_at", UTCDateTime),
    Column("seal_id", Name(32)),  # new at every add: bound into its sealed values (`jobsup.secrets`)
)

# One row per job type, published by the processes that register it (`jobsup start`,
# `jobsup definitions sync`): what a process that only enqueues by name needs to know.
job_definition = Table(
    "jobsup_job_definition",
    metadata,
    Column("name", _NAME, primary_key=True),
    Column("queue", _NAME, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("timeout", Seconds),
    Column("retry_policy", LongText, nullable=False),  # JSON, see `RetryPolicy.describe`
    Column("declared_by", _NAME, nullable=False),  # the instance whose declaration this is
    Column("declared_at", UTCDateTime, nullable=False),
    Column("first_seen_at", UTCDateTime, nullable=False),
    # JSON: the newest declaration that disagreed with this one, by another instance.
    Column("disagreement", LongText),
    Column("triggers", LongText),  # JSON: what every job of this type triggers (`jobsup.Trigger`)
    Column("params", LongText),  # JSON Schema of its parameters (`jobsup.params`); null: untyped
    Column("limits", LongText),  # JSON: its flow-control policy (concurrency, rate, breaker, sla, calendar)
    Column("retain", LongText),  # JSON: its own retention by end state, seconds or null (`jobsup.retention`)
)

workflow = Table(
    "jobsup_workflow",
    metadata,
    Column("id", _ID, Identity(), primary_key=True),
    Column("name", _NAME, nullable=False),
    Column("idempotency_key", _NAME),  # one workflow per key, ever
    Column("created_at", UTCDateTime, nullable=False),
    Column("cancelled_at", UTCDateTime),  # an operator cancelled it
    Column("finished_at", UTCDateTime),  # its last step ended (`workflow.finished` announced)
    sqlite_autoincrement=True,
)

# Edges of a workflow: `job_id` runs once `depends_on` has finished.
job_dependency = Table(
    "jobsup_job_dependency",
    metadata,
    Column("job_id", BigInteger, primary_key=True),
    Column("depends_on", BigInteger, primary_key=True),
)

batch = Table(
    "jobsup_batch",
    metadata,
    Column("id", _ID, Identity(), primary_key=True),
    Column("name", _NAME),
    Column("callbacks", LongText, nullable=False),  # JSON: {"on_complete": {"job", "payload"}, ...}
    Column("total", Integer, nullable=False),  # children added (by `add`, never by a settle)
    Column("created_at", UTCDateTime, nullable=False),
    Column("closed_at", UTCDateTime),  # no more children; its callbacks may fire
    Column("finished_at", UTCDateTime),  # its callbacks fired (the compare-and-set of firing)
    Column("cancelled_at", UTCDateTime),
    sqlite_autoincrement=True,
)

job_log = Table(
    "jobsup_job_log",
    metadata,
    Column("id", _ID, Identity(), primary_key=True),
    Column("job_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("logged_at", UTCDateTime, nullable=False),
    Column("level", Name(10), nullable=False),
    Column("message", LongText, nullable=False),
)

# One row per operator action (`jobsup.store.audit`).
audit = Table(
    "jobsup_audit",
    metadata,
    Column("id", _ID, Identity(), primary_key=True),
    Column("at", UTCDateTime, nullable=False),
    Column("actor", _NAME, nullable=False),
    Column("action", Name(64), nullable=False),
    Column("target", _NAME),  # a queue, a schedule, a job type: what the action named
    Column("job_count", Integer),
    Column("job_ids", LongText),  # JSON: the first ids of the jobs it touched
    Column("outcome", Name(20), nullable=False),
    Column("detail", LongText),  # JSON
    sqlite_autoincrement=True,
)

# A row per queue an operator paused; resuming keeps the row (who resumed it, and when).
queue_state = Table(
    "jobsup_queue_state",
    metadata,
    Column("queue", _NAME, primary_key=True),
    Column("paused", Boolean, nullable=False),
    Column("reason", LongText),
    Column("changed_by", _NAME, nullable=False),
    Column("changed_at", UTCDateTime, nullable=False),
)

# A concurrency key's admitted jobs (pending or running): one over its key's limit waits
# outside the claim index until a job of its key finishes (`jobsup.store.concurrency_keys`).
concurrency = Table(
    "jobsup_concurrency",
    metadata,
    Column("key", _NAME, primary_key=True),
    Column("admitted", Integer, nullable=False),
)

# A rate key's lock and the start time last handed to a job its window had no room for; its
# last `limit` start times, a ring of slots (`jobsup.store.rates`).
rate_limit = Table(
    "jobsup_rate_limit",
    metadata,
    Column("key", _NAME, primary_key=True),
    Column("frontier", UTCDateTime),
)
rate_start = Table(
    "jobsup_rate_start",
    metadata,
    Column("key", _NAME, primary_key=True),
    Column("slot", Integer, primary_key=True, autoincrement=False),
    Column("started_at", UTCDateTime, nullable=False),
)

breaker = Table(
    "jobsup_breaker",
    metadata,
    Column("name", _NAME, primary_key=True),  # the job type
    Column("state", Name(20), nullable=False),  # closed | open | half_open
    Column("failures", Integer, nullable=False),  # consecutive
    Column("opened_at", UTCDateTime),
    Column("reopen_at", UTCDateTime),  # when an open breaker lets one probe through
    Column("probe_job_id", BigInteger),
    Column("changed_by", _NAME),
    Column("changed_at", UTCDateTime, nullable=False),
)

calendar = Table(
    "jobsup_calendar",
    metadata,
    Column("name", _NAME, primary_key=True),
    Column("timezone", Name(64), nullable=False),
    Column("rules", LongText, nullable=False),  # JSON
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

# A row per live dashboard login session (`jobsup.store.websessions`): a signed session
# cookie counts only while its row is here, so logging out ends it in every dashboard process.
web_session = Table(
    "jobsup_web_session",
    metadata,
    Column("id", Name(64), primary_key=True),  # SHA-256 of the cookie's session id, in hex
    Column("user_name", _NAME, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
)

# Events on their way out of the process (`jobsup.events`): written in the transaction of the
# change they announce, deleted once a relay delivered them. `locked_by`/`locked_until` is a
# relay's claim on a row, which lapses if that relay dies.
outbox = Table(
    "jobsup_outbox",
    metadata,
    Column("id", _ID, Identity(), primary_key=True),
    Column("job_id", BigInteger),  # null: an event of no job (a breaker, a queue)
    Column("subject", Name(220)),  # an event of no job: its object (`breaker:NAME`), which orders it
    Column("type", Name(40), nullable=False),
    Column("payload", LongText, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("locked_by", _NAME),
    Column("locked_until", UTCDateTime),
    Column("attempts", Integer, nullable=False, server_default="0"),  # failed tries to deliver it
    Column("last_error", Name(500)),
    Column("parked_at", UTCDateTime),  # refused for good: no relay takes it (jobsup events)
    sqlite_autoincrement=True,
)

process = Table(
    "jobsup_process",
    metadata,
    Column("id", Name(64), primary_key=True),
    Column("kind", Name(20), nullable=False),
    Column("supervisor_id", Name(64)),
    Column("queue", _NAME),
    Column("host", _NAME, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("job_id", BigInteger),
    Column("started_at", UTCDateTime, nullable=False),
    Column("heartbeat_at", UTCDateTime, nullable=False),
)


def _filtered(condition: str) -> dict[str, Any]:
    """The same partial-index predicate for every dialect (written once, as literal SQL)."""
    where: ColumnElement[bool] = literal_column(condition)
    return {"postgresql_where": where, "sqlite_where": where, "mssql_where": where}


Index(
    "jobsup_job_claim",
    job.c.queue,
    job.c.priority.desc(),
    job.c.run_at,
    job.c.id,
    **_filtered("status = 'pending'"),
)
Index("jobsup_job_lease", job.c.lease_expires_at, **_filtered("status = 'running'"))
Index(
    "jobsup_job_unique_key",
    job.c.unique_key,
    unique=True,
    **_filtered("unique_key IS NOT NULL AND status IN ('pending', 'running')"),
)
Index(
    "jobsup_job_recurring_slot",
    job.c.recurring_name,
    job.c.scheduled_slot,
    unique=True,
    **_filtered("recurring_name IS NOT NULL"),
)
# A query states this too (`IN_FINISHED_INDEX`): SQLite's planner does not infer it from `status = ...`.
FINISHED_INDEX_WHERE = "status IN ('succeeded', 'dead_lettered', 'cancelled')"
Index("jobsup_job_finished", job.c.status, job.c.finished_at, **_filtered(FINISHED_INDEX_WHERE))
# The retention purge of one job type with its own ages (`jobsup.retention`): a seek, oldest first.
Index("jobsup_job_finished_name", job.c.status, job.c.name, job.c.finished_at, **_filtered(FINISHED_INDEX_WHERE))
Index("jobsup_job_workflow", job.c.workflow_id, **_filtered("workflow_id IS NOT NULL"))
Index("jobsup_job_rerun_of", job.c.rerun_of, **_filtered("rerun_of IS NOT NULL"))
# A batch's children: all of them (counts, retention), and the unfinished ones, newest first,
# for the check "is any sibling left" that each child's settle makes.
Index("jobsup_job_batch", job.c.batch_id, job.c.status, **_filtered("batch_id IS NOT NULL"))
Index(
    "jobsup_job_batch_unfinished",
    job.c.batch_id,
    job.c.id,
    **_filtered("batch_id IS NOT NULL AND status IN ('waiting', 'pending', 'running')"),
)
Index("jobsup_job_dependency_on", job_dependency.c.depends_on)
Index("jobsup_workflow_key", workflow.c.idempotency_key, unique=True, **_filtered("idempotency_key IS NOT NULL"))
Index("jobsup_batch_open", batch.c.id, **_filtered("finished_at IS NULL"))
Index("jobsup_job_log_job", job_log.c.job_id, job_log.c.id)
Index("jobsup_job_attempt_job", job_attempt.c.job_id, job_attempt.c.attempt)
Index("jobsup_process_heartbeat", process.c.heartbeat_at)
Index("jobsup_job_sealed", job.c.id, **_filtered("key_id IS NOT NULL"))
Index("jobsup_audit_at", audit.c.at)
Index("jobsup_web_session_expires", web_session.c.expires_at)
Index("jobsup_outbox_job", outbox.c.job_id, outbox.c.id)  # "is an earlier event of this job left"
Index("jobsup_workflow_unfinished", workflow.c.id, **_filtered("finished_at IS NULL"))  # the sweep's
Index("jobsup_outbox_subject", outbox.c.subject, outbox.c.id, **_filtered("subject IS NOT NULL"))
Index(
    "jobsup_job_concurrency_waiting",
    job.c.concurrency_key,
    job.c.priority.desc(),
    job.c.run_at,
    job.c.id,
    **_filtered("status = 'waiting' AND concurrency_key IS NOT NULL"),
)
_ADMITTED = "concurrency_key IS NOT NULL AND status IN ('pending', 'running')"  # a key's slots, recounted
Index("jobsup_job_concurrency_admitted", job.c.concurrency_key, job.c.status, **_filtered(_ADMITTED))
_SLA_START = "sla_start_by IS NOT NULL AND sla_breached_at IS NULL AND status IN ('waiting', 'pending')"
_SLA_FINISH = "sla_finish_by IS NOT NULL AND sla_breached_at IS NULL AND status IN ('waiting', 'pending', 'running')"
Index("jobsup_job_sla_start", job.c.sla_start_by, **_filtered(_SLA_START))
Index("jobsup_job_sla_finish", job.c.sla_finish_by, **_filtered(_SLA_FINISH))
