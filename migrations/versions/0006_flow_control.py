"""Flow control: concurrency keys, rate limits, circuit breakers, SLAs, calendars, and
recurring schedules that do not overlap.

- `jobsup_job`: `concurrency_key` and its `concurrency_limit` (copied from the job type's
  policy at enqueue, so the claim needs no join); the SLA deadlines `sla_start_by`,
  `sla_finish_by` and the breach mark `sla_breached_at`. All null for a job that uses none.
- `jobsup_concurrency`: a key's admitted jobs (pending or running); a job over its key's
  limit waits (status `waiting`, no dependencies) outside the claim index, in the order of
  `jobsup_job_concurrency_waiting`, until a job of its key finishes.
- `jobsup_rate_limit`: a token bucket per rate key.
- `jobsup_breaker`: a job type's circuit breaker.
- `jobsup_calendar`: named calendars of rules.
- `jobsup_recurring_job`: `overlap`, a calendar and how it applies, skipped slots.
- `jobsup_job_definition.limits`: the type's flow-control policy (JSON).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import LongText, Name, Seconds, UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

NAME = Name(200)

JOB_COLUMNS = (
    ("concurrency_key", NAME),
    ("concurrency_limit", sa.Integer),
    ("sla_start_by", UTCDateTime),
    ("sla_finish_by", UTCDateTime),
    ("sla_breached_at", UTCDateTime),
)
RECURRING_COLUMNS = (
    ("overlap", Name(10)),
    ("calendar", NAME),
    ("calendar_mode", Name(20)),
    ("calendar_policy", Name(20)),
    ("skipped", sa.Integer),
    ("last_skipped_at", UTCDateTime),
)


def _where(condition: str) -> dict[str, Any]:
    clause = sa.text(condition)
    return {"postgresql_where": clause, "sqlite_where": clause, "mssql_where": clause}


def upgrade() -> None:
    for name, type_ in JOB_COLUMNS:
        op.add_column("jobsup_job", sa.Column(name, type_))
    for name, type_ in RECURRING_COLUMNS:
        op.add_column("jobsup_recurring_job", sa.Column(name, type_))
    op.add_column("jobsup_job_definition", sa.Column("limits", LongText))
    op.create_table(
        "jobsup_concurrency",
        sa.Column("key", NAME, primary_key=True),
        sa.Column("admitted", sa.Integer, nullable=False),
    )
    op.create_table(
        "jobsup_rate_limit",
        sa.Column("key", NAME, primary_key=True),
        sa.Column("tokens", Seconds, nullable=False),
        sa.Column("refilled_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "jobsup_breaker",
        sa.Column("name", NAME, primary_key=True),
        sa.Column("state", Name(20), nullable=False),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("opened_at", UTCDateTime),
        sa.Column("reopen_at", UTCDateTime),
        sa.Column("probe_job_id", sa.BigInteger),
        sa.Column("changed_by", NAME),
        sa.Column("changed_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "jobsup_calendar",
        sa.Column("name", NAME, primary_key=True),
        sa.Column("timezone", Name(64), nullable=False),
        sa.Column("rules", LongText, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )
    # MariaDB/MySQL drop the condition: the status leads instead, as in their claim index.
    leading = ["status"] if op.get_context().dialect.name in ("mysql", "mariadb") else []
    op.create_index(
        "jobsup_job_concurrency_waiting",
        "jobsup_job",
        [*leading, "concurrency_key", sa.text("priority DESC"), "run_at", "id"],
        **_where("status = 'waiting' AND concurrency_key IS NOT NULL"),
    )
    op.create_index(
        "jobsup_job_sla_start",
        "jobsup_job",
        ["sla_start_by"],
        **_where("sla_start_by IS NOT NULL AND sla_breached_at IS NULL AND status IN ('waiting', 'pending')"),
    )
    op.create_index(
        "jobsup_job_sla_finish",
        "jobsup_job",
        ["sla_finish_by"],
        **_where(
            "sla_finish_by IS NOT NULL AND sla_breached_at IS NULL AND status IN ('waiting', 'pending', 'running')"
        ),
    )


def downgrade() -> None:
    for index in ("jobsup_job_concurrency_waiting", "jobsup_job_sla_start", "jobsup_job_sla_finish"):
        op.drop_index(index, table_name="jobsup_job")
    for table in ("jobsup_calendar", "jobsup_breaker", "jobsup_rate_limit", "jobsup_concurrency"):
        op.drop_table(table)
    with op.batch_alter_table("jobsup_job_definition") as batch:
        batch.drop_column("limits")
    with op.batch_alter_table("jobsup_recurring_job") as batch:
        for name, _ in reversed(RECURRING_COLUMNS):
            batch.drop_column(name)
    with op.batch_alter_table("jobsup_job") as batch:
        for name, _ in reversed(JOB_COLUMNS):
            batch.drop_column(name)
