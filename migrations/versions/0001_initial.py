"""The first jobsup schema: jobs, attempts, recurring schedules, processes.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import LongText, Name, Seconds, UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
NAME = Name(200)


def _where(condition: str) -> dict[str, Any]:
    clause = sa.text(condition)
    return {"postgresql_where": clause, "sqlite_where": clause, "mssql_where": clause}


def job_columns() -> list[sa.Column[Any]]:
    """The job table's columns as this revision made them (0003 rebuilds the table from them)."""
    return [
        sa.Column("id", ID, sa.Identity(), primary_key=True),
        sa.Column("name", NAME, nullable=False),
        sa.Column("queue", NAME, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("payload", LongText, nullable=False),
        sa.Column("status", Name(20), nullable=False),
        sa.Column("run_at", UTCDateTime, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("lease_owner", NAME),
        sa.Column("lease_expires_at", UTCDateTime),
        sa.Column("last_error", LongText),
        sa.Column("unique_key", NAME),
        sa.Column("actor", NAME),
        sa.Column("recurring_name", NAME),
        sa.Column("scheduled_slot", UTCDateTime),
        sa.Column("timeout", Seconds),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime),
        sa.Column("result", LongText),
    ]


def create_job_indexes() -> None:
    """The job table's indexes as this revision made them (0003 makes them again)."""
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        create_mariadb_job_indexes()
        return
    op.create_index(
        "jobsup_job_claim",
        "jobsup_job",
        ["queue", sa.text("priority DESC"), "run_at", "id"],
        **_where("status = 'pending'"),
    )
    op.create_index("jobsup_job_lease", "jobsup_job", ["lease_expires_at"], **_where("status = 'running'"))
    op.create_index(
        "jobsup_job_unique_key",
        "jobsup_job",
        ["unique_key"],
        unique=True,
        **_where("unique_key IS NOT NULL AND status IN ('pending', 'running')"),
    )
    op.create_index(
        "jobsup_job_recurring_slot",
        "jobsup_job",
        ["recurring_name", "scheduled_slot"],
        unique=True,
        **_where("recurring_name IS NOT NULL"),
    )
    op.create_index(
        "jobsup_job_finished",
        "jobsup_job",
        ["status", "finished_at"],
        **_where("status IN ('succeeded', 'dead_lettered', 'cancelled')"),
    )


def create_mariadb_job_indexes() -> None:
    """MariaDB and MySQL have no partial indexes (the conditions above would be dropped): the
    claim and lease indexes lead with the status instead, and the live-only unique key is a
    unique index on a generated column that is NULL once the job is no longer live (NULLs
    never collide), so a finished job's key can be enqueued again."""
    op.add_column("jobsup_job", sa.Column("live_unique_key", NAME, sa.Computed(LIVE_UNIQUE_KEY, persisted=True)))
    op.create_index("jobsup_job_claim", "jobsup_job", ["status", "queue", sa.text("priority DESC"), "run_at", "id"])
    op.create_index("jobsup_job_lease", "jobsup_job", ["status", "lease_expires_at"])
    op.create_index("jobsup_job_unique_key", "jobsup_job", ["live_unique_key"], unique=True)
    op.create_index("jobsup_job_recurring_slot", "jobsup_job", ["recurring_name", "scheduled_slot"], unique=True)
    op.create_index("jobsup_job_finished", "jobsup_job", ["status", "finished_at"])


LIVE_UNIQUE_KEY = "CASE WHEN status IN ('pending', 'running') THEN unique_key END"


def upgrade() -> None:
    op.create_table("jobsup_job", *job_columns())
    create_job_indexes()

    op.create_table(
        "jobsup_job_attempt",
        sa.Column("id", ID, sa.Identity(), primary_key=True),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("owner", NAME, nullable=False),
        sa.Column("started_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime),
        sa.Column("outcome", Name(20)),
        sa.Column("error", LongText),
    )
    op.create_index("jobsup_job_attempt_job", "jobsup_job_attempt", ["job_id", "attempt"])

    op.create_table(
        "jobsup_recurring_job",
        sa.Column("name", NAME, primary_key=True),
        sa.Column("job_name", NAME, nullable=False),
        sa.Column("cron", Name(100), nullable=False),
        sa.Column("timezone", Name(64), nullable=False),
        sa.Column("payload", LongText, nullable=False),
        sa.Column("queue", NAME, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("next_run_at", UTCDateTime, nullable=False),
        sa.Column("last_fired_at", UTCDateTime),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )

    op.create_table(
        "jobsup_process",
        sa.Column("id", Name(64), primary_key=True),
        sa.Column("kind", Name(20), nullable=False),
        sa.Column("supervisor_id", Name(64)),
        sa.Column("queue", NAME),
        sa.Column("host", NAME, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("job_id", sa.BigInteger),
        sa.Column("started_at", UTCDateTime, nullable=False),
        sa.Column("heartbeat_at", UTCDateTime, nullable=False),
    )
    op.create_index("jobsup_process_heartbeat", "jobsup_process", ["heartbeat_at"])


def downgrade() -> None:
    op.drop_table("jobsup_process")
    op.drop_table("jobsup_recurring_job")
    op.drop_table("jobsup_job_attempt")
    op.drop_table("jobsup_job")
