"""Rate limits as sliding windows of start times, replacing 0006's token bucket (never used:
a token bucket lets twice its limit start inside one period, at the end of one refill and
the start of the next).

- `jobsup_rate_limit`: one row per rate key, the lock its claims take turns on, and
  `frontier`, the latest start time handed to a job the window had no room for (a backlog
  drains in that order, one start every period/limit).
- `jobsup_rate_start`: the key's last `limit` start times, a ring of slots.
- `jobsup_job.rate_turn`: the start time the window gave a job it put back (null for the rest).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import Name, Seconds, UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

NAME = Name(200)


def upgrade() -> None:
    op.drop_table("jobsup_rate_limit")
    op.create_table(
        "jobsup_rate_limit",
        sa.Column("key", NAME, primary_key=True),
        sa.Column("frontier", UTCDateTime),
    )
    op.create_table(
        "jobsup_rate_start",
        sa.Column("key", NAME, primary_key=True),
        sa.Column("slot", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("started_at", UTCDateTime, nullable=False),
    )
    op.add_column("jobsup_job", sa.Column("rate_turn", UTCDateTime))


def downgrade() -> None:
    with op.batch_alter_table("jobsup_job") as batch:
        batch.drop_column("rate_turn")
    op.drop_table("jobsup_rate_start")
    op.drop_table("jobsup_rate_limit")
    op.create_table(
        "jobsup_rate_limit",
        sa.Column("key", NAME, primary_key=True),
        sa.Column("tokens", Seconds, nullable=False),
        sa.Column("refilled_at", UTCDateTime, nullable=False),
    )
