"""What a running job reaches through its context beyond itself: the results of the
workflow steps it depends on (`ctx.upstream`), its own log (`ctx.log`, see
`jobsup.worker.joblog`) and its progress (`ctx.set_progress`). One per worker process, on the worker's store."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

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

    def extras(self, job: ClaimedJob, secrets: Any) -> dict[str, Any]:
        """The JobContext fields of `job` beyond its row (`secrets`: what to scrub from what it logs)."""
        logger = self.journal.logger(job, secrets)
        extras: dict[str, Any] = {
            "client_loader": self.client,
            "log": logger,
            "progress_writer": partial(self.journal.report, logger),
        }
        if job.workflow_id is not None:
            extras["upstream_loader"] = partial(self.store.reads.job_upstream, job.id)
        return extras

    def client(self) -> Client:
        """One `jobsup.Client` per worker, on the worker's own database."""
        if self._client is None:
            from jobsup.client import Client

            self._client = Client(database=self.store.db)
        return self._client

    def finished(self, job: ClaimedJob) -> None:
        """The job's call has returned: called before its outcome is written."""
        self.journal.finished(job)
