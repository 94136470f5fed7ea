"""A schedule's sealed values are bound to its row, not only to its name.

`jobsup_recurring_job` gains `seal_id`: a random id written at every `add_recurring` and
bound into the associated data of the schedule's sealed values (with its job type), so a
schedule removed and added again under the same name, or given another job type, does not
open the ciphertexts of the one before. Rows sealed before this revision keep a null
`seal_id` and version 1 envelopes, which still open; `jobsup keys rotate` re-seals them.
A downgrade drops the ids, so the schedules sealed since no longer open: add them again.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import Name

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobsup_recurring_job", sa.Column("seal_id", Name(32)))


def downgrade() -> None:
    with op.batch_alter_table("jobsup_recurring_job") as batch:
        batch.drop_column("seal_id")
