"""Dashboard sessions end on the server: a row per live login session.

A session cookie is signed and carries its expiry, but without state on the server a
copied cookie kept working after logout. `jobsup_web_session` holds one row per live
session (the SHA-256 of its random id); logout deletes the row, and a cookie whose row is
gone is refused by every dashboard process on the database.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import Name, UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobsup_web_session",
        sa.Column("id", Name(64), primary_key=True),
        sa.Column("user_name", Name(200), nullable=False),
        sa.Column("expires_at", UTCDateTime, nullable=False),
    )
    op.create_index("jobsup_web_session_expires", "jobsup_web_session", ["expires_at"])


def downgrade() -> None:
    op.drop_index("jobsup_web_session_expires", table_name="jobsup_web_session")
    op.drop_table("jobsup_web_session")
