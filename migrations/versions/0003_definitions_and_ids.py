"""Job definitions, job ids that are never reused, and a job's own attempt budget.

- `jobsup_job_definition`: one row per job type, published by the processes that register
  it, so a process that enqueues by name alone gets the job type's queue, attempts and
  timeout.
- SQLite hands a deleted row's id to the next insert unless the table is AUTOINCREMENT: after
  the newest job was purged, a stored old id would get or cancel someone else's job. The
  job table is rebuilt with AUTOINCREMENT (its rows, ids and indexes kept). PostgreSQL
  identities and SQL Server IDENTITY columns never reuse ids.
- `jobsup_job.budget`: a dead-letter retry raises `max_attempts` by the job's own budget (its
  first `max_attempts`), so attempt numbers only go up; null until the first retry.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import importlib

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import LongText, Name, Seconds, UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

NAME = Name(200)


def upgrade() -> None:
    op.create_table(
        "jobsup_job_definition",
        sa.Column("name", NAME, primary_key=True),
        sa.Column("queue", NAME, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("timeout", Seconds),
        sa.Column("retry_policy", LongText, nullable=False),
        sa.Column("declared_by", NAME, nullable=False),
        sa.Column("declared_at", UTCDateTime, nullable=False),
        sa.Column("first_seen_at", UTCDateTime, nullable=False),
        sa.Column("disagreement", LongText),
    )
    op.add_column("jobsup_job", sa.Column("budget", sa.Integer))
    # A revision is a fixed script for the databases it knew, so it asks the database kind
    # itself rather than through today's dialect classes.
    if op.get_context().dialect.name == "sqlite":
        _rebuild_sqlite_job_table(autoincrement=True)


def downgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        _rebuild_sqlite_job_table(autoincrement=False)
    with op.batch_alter_table("jobsup_job") as batch:
        batch.drop_column("budget")
    op.drop_table("jobsup_job_definition")


def _rebuild_sqlite_job_table(*, autoincrement: bool) -> None:
    # The table as it stands, so the rebuild needs no reflection (and works for --sql too).
    initial = importlib.import_module("jobsup.migrations.versions.0001_initial")
    columns = [*initial.job_columns(), sa.Column("budget", sa.Integer)]
    as_is = sa.Table("jobsup_job", sa.MetaData(), *columns)
    with op.batch_alter_table(
        "jobsup_job", recreate="always", copy_from=as_is, table_kwargs={"sqlite_autoincrement": autoincrement}
    ):
        pass
    initial.create_job_indexes()  # dropped with the old table
