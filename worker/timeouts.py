"""A job's timeout: its own (given when it was enqueued), else its type's, else its queue's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobsup.store.rows import ClaimedJob

if TYPE_CHECKING:
    from jobsup.jobtypes import Resolver


class Timeouts:
    def __init__(self, resolver: Resolver, queue_timeout: float | None) -> None:
        self.resolver, self.queue_timeout = resolver, queue_timeout
        # Each type's, read once a claim (it was 0.3 µs of every job at claim batch 100): its
        # settings may be published anew meanwhile, and reading them is what looks for that.
        self.of_type: dict[str, float | None] = {}

    def claimed(self) -> None:
        """A claim's jobs come: each type's settings are read again."""
        self.of_type.clear()

    def of(self, job: ClaimedJob) -> float | None:
        if job.timeout is not None:
            return job.timeout
        of_type = self.of_type
        if job.name not in of_type:
            timeout = self.resolver.settings_of(job.name).timeout
            of_type[job.name] = timeout if timeout is not None else self.queue_timeout
        return of_type[job.name]
