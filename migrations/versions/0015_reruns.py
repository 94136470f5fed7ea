"""A job made again from a finished one (`jobsup jobs rerun`) names it: `rerun_of`.

The new job is a job of its own (its own attempts, result and logs); the link is shown both
ways, so the original's page lists its reruns, through a partial index of the few rows that
have one (MariaDB has no partial index: its index holds every row, most of them NULL).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobsup_job", sa.Column("rerun_of", sa.BigInteger))
    where = sa.text("rerun_of IS NOT NULL")
    op.create_index(
        "jobsup_job_rerun_of", "jobsup_job", ["rerun_of"], postgresql_where=where, sqlite_where=where, mssql_where=where
    )


def downgrade() -> None:
    op.drop_index("jobsup_job_rerun_of", table_name="jobsup_job")
    with op.batch_alter_table("jobsup_job") as batch:
        batch.drop_column("rerun_of")
