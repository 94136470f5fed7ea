"""A job type's own retention (`@jobsup.job(retain=...)`): `jobsup_job_definition.retain`, and
the index its purge seeks.

`retain` is JSON, seconds (or null: forever) by end state, for the states the type sets; null
for a type that follows the `retain_*` settings. It is a column of its own, not a part of
`limits` (the flow-control policies a claim reads).

`jobsup_job_finished_name` (status, name, finished_at), over finished jobs, is what the purge
of one such type seeks, oldest first: the `jobsup_job_finished` index alone would read past
every other type's finished jobs to find its. Building it reads the finished rows once
(MariaDB has no partial index: its index holds every row).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import LongText

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobsup_job_definition", sa.Column("retain", LongText))
    where = sa.text("status IN ('succeeded', 'dead_lettered', 'cancelled')")
    op.create_index(
        "jobsup_job_finished_name",
        "jobsup_job",
        ["status", "name", "finished_at"],
        postgresql_where=where,
        sqlite_where=where,
        mssql_where=where,
    )


def downgrade() -> None:
    op.drop_index("jobsup_job_finished_name", table_name="jobsup_job")
    with op.batch_alter_table("jobsup_job_definition") as batch:
        batch.drop_column("retain")
