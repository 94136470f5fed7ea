"""A running job's cancel is a request its worker answers; a key's admitted jobs are counted
from the job rows by maintenance.

`jobsup_job` gains `cancel_requested_at`: set when an operator cancels a job that is running.
The row stays running, and keeps its lease and whatever it holds (a concurrency key's slot,
its place as a breaker's probe, its workflow step unfinished), until the end of the attempt
is written by its worker, or, once that worker is dead, by its supervisor or the sweep; that
end is then `cancelled` (a success the function returned first stays a success).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobsup_job", sa.Column("cancel_requested_at", UTCDateTime))
    where = sa.text("concurrency_key IS NOT NULL AND status IN ('pending', 'running')")
    # MariaDB has no partial index: its index holds every row, finished ones with a key too.
    op.create_index(
        "jobsup_job_concurrency_admitted",
        "jobsup_job",
        ["concurrency_key", "status"],
        postgresql_where=where,
        sqlite_where=where,
        mssql_where=where,
    )


def downgrade() -> None:
    op.drop_index("jobsup_job_concurrency_admitted", table_name="jobsup_job")
    with op.batch_alter_table("jobsup_job") as batch:
        batch.drop_column("cancel_requested_at")
