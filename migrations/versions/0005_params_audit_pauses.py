"""Typed parameters, secrets sealed at rest, an audit trail, and paused queues.

- `jobsup_job_definition.params`: the job type's parameters as JSON Schema (null: untyped).
- `jobsup_job.key_id` and `jobsup_recurring_job.key_id`: the encryption key the row's sensitive
  values are sealed with (null for a row without secrets, so a plain job is as before);
  `jobsup keys rotate` finds the rows of older keys through the filtered index.
- `jobsup_audit`: one row per operator action.
- `jobsup_queue_state`: a row per queue an operator paused (or paused and resumed).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import LongText, Name, UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
NAME = Name(200)


def _where(condition: str) -> dict[str, Any]:
    clause = sa.text(condition)
    return {"postgresql_where": clause, "sqlite_where": clause, "mssql_where": clause}


def upgrade() -> None:
    op.add_column("jobsup_job_definition", sa.Column("params", LongText))
    op.add_column("jobsup_job", sa.Column("key_id", Name(64)))
    op.add_column("jobsup_recurring_job", sa.Column("key_id", Name(64)))
    op.create_index("jobsup_job_sealed", "jobsup_job", ["id"], **_where("key_id IS NOT NULL"))
    op.create_table(
        "jobsup_audit",
        sa.Column("id", ID, sa.Identity(), primary_key=True),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("actor", NAME, nullable=False),
        sa.Column("action", Name(64), nullable=False),
        sa.Column("target", NAME),
        sa.Column("job_count", sa.Integer),
        sa.Column("job_ids", LongText),
        sa.Column("outcome", Name(20), nullable=False),
        sa.Column("detail", LongText),
        sqlite_autoincrement=True,
    )
    op.create_index("jobsup_audit_at", "jobsup_audit", ["at"])
    op.create_table(
        "jobsup_queue_state",
        sa.Column("queue", NAME, primary_key=True),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("reason", LongText),
        sa.Column("changed_by", NAME, nullable=False),
        sa.Column("changed_at", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("jobsup_queue_state")
    op.drop_index("jobsup_audit_at", table_name="jobsup_audit")
    op.drop_table("jobsup_audit")
    op.drop_index("jobsup_job_sealed", table_name="jobsup_job")
    with op.batch_alter_table("jobsup_recurring_job") as batch:
        batch.drop_column("key_id")
    with op.batch_alter_table("jobsup_job") as batch:
        batch.drop_column("key_id")
    with op.batch_alter_table("jobsup_job_definition") as batch:
        batch.drop_column("params")
