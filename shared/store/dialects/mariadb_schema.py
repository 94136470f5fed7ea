"""The jobsup schema as it stands on MariaDB/MySQL, which have no partial indexes.

`jobsup.store.schema` describes the tables once, with filtered indexes. On these servers
the migrations give four of those indexes another shape (see `jobsup.store.dialects.mariadb`):
the claim, lease and waiting-for-a-concurrency-slot indexes lead with the status, and the
live-only unique key is a unique index on a generated column. `model()` is the schema with
those shapes, the description the migrations are checked against here.
"""

from __future__ import annotations

from sqlalchemy import Column, Computed, Index, MetaData, text

from jobsup.store.dialects.types import Name
from jobsup.store.schema import metadata

# NULL once the job is no longer live, so a finished job's key can be enqueued again.
LIVE_UNIQUE_KEY = "CASE WHEN status IN ('pending', 'running') THEN unique_key END"

_LEADING_STATUS = ("jobsup_job_claim", "jobsup_job_lease", "jobsup_job_concurrency_waiting")


def model() -> MetaData:
    """A copy of the schema's metadata in MariaDB's shape."""
    shaped = MetaData()
    for table in metadata.sorted_tables:
        table.to_metadata(shaped)
    job = shaped.tables["jobsup_job"]
    job.append_column(Column("live_unique_key", Name(200), Computed(text(LIVE_UNIQUE_KEY), persisted=True)))
    for index in list(job.indexes):
        if index.name in _LEADING_STATUS:
            job.indexes.remove(index)
            Index(index.name, job.c.status, *index.expressions)
        elif index.name == "jobsup_job_unique_key":
            job.indexes.remove(index)
            Index(index.name, job.c.live_unique_key, unique=True)
    return shaped
