"""A running job's progress (`ctx.set_progress`), on its attempt.

Each attempt keeps the progress it last reported: a retry starts with none, and the history
shows how far each attempt came. JSON text: a number from 0 to 1, or a small object.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import LongText

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobsup_job_attempt", sa.Column("progress", LongText))


def downgrade() -> None:
    op.drop_column("jobsup_job_attempt", "progress")
