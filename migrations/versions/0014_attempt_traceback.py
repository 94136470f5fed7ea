"""A failed attempt's traceback, as frames.

Each frame is its file, line and function only: no source lines, no locals, no argument
values, so a payload value cannot reach it (the file and function names are scrubbed as the
error text is, besides). JSON text: a list of ``{"file", "line", "function"}``, innermost
last, at most `jobsup.worker.frames.MAX_FRAMES`.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import LongText

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobsup_job_attempt", sa.Column("traceback", LongText))


def downgrade() -> None:
    op.drop_column("jobsup_job_attempt", "traceback")
