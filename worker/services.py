"""What a running job reaches through its context beyond itself: the results of the
workflow steps it depends on (`ctx.upstream`), its own log (`ctx.log`, see
`jobsup.worker.joblog`) and its progress (`ctx.set_progress`). One per worker process, on the worker's store."""

from __future__ import annotations

import threading
from functools import partial
from typing import TYPE_CHECKING, Any

from jobsup.context import JobContext, job_context
from jobsup.store.rows import ClaimedJob
from jobsup.store.store import Store
from jobsup.worker.journal import Journal

if TYPE_CHECKING:
    from jobsup.client import Client


class JobServices:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.journal = Journal(store.logs, store.progress)
        self._client: Client | None = None

    def context(self, job: ClaimedJob, payload: Any, cancelled: threading.Event, secrets: Any) -> JobContext:
        """`job`'s context, with what it reaches beyond its row (`secrets`: what to scrub
        from what it logs)."""
        logger = self.journal.logger(job, secrets)
        return job_context(
            job.id,
            job.name,
            job.queue,
            job.attempt,
            job.max_attempts,
            payload,
            job.actor,
            cancelled,
            log=logger,
            upstream_loader=None if job.workflow_id is None else partial(self.store.reads.job_upstream, job.id),
            client_loader=self.client,
            progress_writer=logger.report,
        )

    def client(self) -> Client:
        """One `jobsup.Client` per worker, on the worker's own database."""
        if self._client is None:
            from jobsup.client import Client

            self._client = Client(database=self.store.db)
        return self._client

    def finished(self, job: ClaimedJob) -> None:
        """The job's call has returned: called before its outcome is written."""
        self.journal.finished(job)
