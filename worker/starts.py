"""A job's start, as its worker announces it: the `job.started` event (the wait histogram of
the metrics, and a log line at DEBUG) and its run's span (`jobsup.observe.tracing`).

The starts of a batch run one by one are held and announced together, as one `jobs.started`
event (its jobs in `each`, see `catalogue.EACH`): once the batch has run, and by the lease
thread at each of its ticks meanwhile, just before it writes the worker's metric samples (so
a start is counted within a quarter second, as the worker's other samples are,
`jobsup.observe.metrics`), and on the way out of a crash. Unless the log
shows each start (DEBUG): then each job's line is written as it starts, so a job that hangs
has its start in the log. At a claim batch of 100 an event per start was about a fifteenth
of a worker's CPU; a pool's jobs, which start as places free, each have their event.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from jobsup.clock import host_seconds
from jobsup.observe import logs, tracing
from jobsup.observe.events import emit

if TYPE_CHECKING:
    from jobsup.worker.lease import Running

Start = tuple[int, str, int, str, float | None]  # catalogue.EACH's fields of jobs.started


class Starts:
    def __init__(self, label: str) -> None:
        self.label = label  # the worker's, for the events
        self.held: list[Start] | None = None  # the starts of the batch under way, not yet announced
        self.lock = threading.Lock()  # the main thread adds, the lease thread may announce

    def batch(self) -> None:
        """A batch begins: hold its starts for `announce_held`, unless the log shows each."""
        held: list[Start] | None = None if logs.shows("job.started") else []
        with self.lock:
            self.held = held

    def announce(self, running: Running) -> None:
        """`running` starts: its span, and its event (held while a batch runs)."""
        job = running.job
        running.traced = tracing.run(job)
        # The host's clock as seconds, without a datetime's subtraction and a rounding (0.35 µs
        # of a job's 12; a held start is rounded if its line is written).
        due = job.due
        waited = None if due is None else host_seconds() - due
        with self.lock:
            if self.held is not None:
                self.held.append((job.id, job.name, job.attempt, job.queue, waited))
                return
        emit(
            "job.started",
            job=job.id,
            name=job.name,
            attempt=job.attempt,
            queue=job.queue,
            worker=self.label,
            waited=None if waited is None else round(waited, 6),
        )

    def announce_held(self, *, ended: bool = True) -> None:
        """Announce the starts held: the batch has run (`ended`), or the lease thread ticks."""
        with self.lock:
            held = self.held
            self.held = None if ended or held is None else []
        if held:
            emit("jobs.started", count=len(held), worker=self.label, each=held)
