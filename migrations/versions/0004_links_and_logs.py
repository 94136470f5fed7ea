"""Jobs that depend on jobs: workflows, batches, triggers, and per-job logs.

- `jobsup_job` gains the links of `jobsup.store.links` (all null for a plain job, so a
  plain job's rows and claim are as before) and a status `waiting`, outside the claim index.
- `jobsup_workflow`, `jobsup_job_dependency`, `jobsup_batch`, `jobsup_job_log`.
- `jobsup_job_definition.triggers`: what every job of a type triggers.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import LongText, Name, UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
NAME = Name(200)

JOB_COLUMNS = (
    ("workflow_id", sa.BigInteger),
    ("step", NAME),
    ("batch_id", sa.BigInteger),
    ("parent_id", sa.BigInteger),
    ("waiting_on", sa.Integer),
    ("failed_deps", sa.Integer),
    ("on_failure", Name(10)),
    ("triggers", LongText),
)


def _where(condition: str) -> dict[str, Any]:
    clause = sa.text(condition)
    return {"postgresql_where": clause, "sqlite_where": clause, "mssql_where": clause}


def upgrade() -> None:
    for name, type_ in JOB_COLUMNS:
        op.add_column("jobsup_job", sa.Column(name, type_))
    op.add_column("jobsup_job_definition", sa.Column("triggers", LongText))
    op.create_table(
        "jobsup_workflow",
        sa.Column("id", ID, sa.Identity(), primary_key=True),
        sa.Column("name", NAME, nullable=False),
        sa.Column("idempotency_key", NAME),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("cancelled_at", UTCDateTime),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "jobsup_job_dependency",
        sa.Column("job_id", sa.BigInteger, primary_key=True),
        sa.Column("depends_on", sa.BigInteger, primary_key=True),
    )
    op.create_table(
        "jobsup_batch",
        sa.Column("id", ID, sa.Identity(), primary_key=True),
        sa.Column("name", NAME),
        sa.Column("callbacks", LongText, nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("closed_at", UTCDateTime),
        sa.Column("finished_at", UTCDateTime),
        sa.Column("cancelled_at", UTCDateTime),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "jobsup_job_log",
        sa.Column("id", ID, sa.Identity(), primary_key=True),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("logged_at", UTCDateTime, nullable=False),
        sa.Column("level", Name(10), nullable=False),
        sa.Column("message", LongText, nullable=False),
    )
    op.create_index("jobsup_job_workflow", "jobsup_job", ["workflow_id"], **_where("workflow_id IS NOT NULL"))
    op.create_index("jobsup_job_batch", "jobsup_job", ["batch_id", "status"], **_where("batch_id IS NOT NULL"))
    op.create_index(
        "jobsup_job_batch_unfinished",
        "jobsup_job",
        ["batch_id", "id"],
        **_where("batch_id IS NOT NULL AND status IN ('waiting', 'pending', 'running')"),
    )
    op.create_index("jobsup_job_dependency_on", "jobsup_job_dependency", ["depends_on"])
    op.create_index(
        "jobsup_workflow_key",
        "jobsup_workflow",
        ["idempotency_key"],
        unique=True,
        **_where("idempotency_key IS NOT NULL"),
    )
    op.create_index("jobsup_batch_open", "jobsup_batch", ["id"], **_where("finished_at IS NULL"))
    op.create_index("jobsup_job_log_job", "jobsup_job_log", ["job_id", "id"])


def downgrade() -> None:
    for index in ("jobsup_job_workflow", "jobsup_job_batch", "jobsup_job_batch_unfinished"):
        op.drop_index(index, table_name="jobsup_job")
    for table in ("jobsup_job_log", "jobsup_batch", "jobsup_job_dependency", "jobsup_workflow"):
        op.drop_table(table)
    with op.batch_alter_table("jobsup_job_definition") as batch:
        batch.drop_column("triggers")
    with op.batch_alter_table("jobsup_job") as batch:
        for name, _ in reversed(JOB_COLUMNS):
            batch.drop_column(name)
