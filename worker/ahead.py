"""A pool's jobs claimed ahead: claimed before a place frees, started the moment one does.

A pool that claimed only for the places already free left each place empty for a claim's
round trip whenever its job ended, and, amid a backlog, until a quarter of the places had
freed (so that one claim fills several: `jobsup.worker.loop.FILL_WAIT`). With jobs of 50 ms
that was a sixth of every place's time. While the pool's jobs run short, it holds up to its
size in jobs claimed ahead: a place that frees starts one of them at once, and the claim that
replaces them waits, with no place empty, until half the pool's worth is due (one claim of
many rows costs less than several of few; measured on 50 ms jobs, 2 x 50: claims of 25 and
a pool's worth ahead took a third fewer commits and about 5 % less CPU per job than claims
of 13 and half a pool ahead, at the same throughput).

A job claimed ahead holds a lease, so no other worker can run it meanwhile: it must not wait
long.
- Jobs are claimed ahead only while the pool's jobs run under `QUICK` (a moving mean of the
  last ones' runs): one waits about a job's run.
- One that has waited `HOLD_WAITING` since its claim came back is given back, unstarted, by
  the lease thread (which runs whatever the main thread is waiting on: a write, a claim);
  `LeaseKeeper.begin` refuses it too. After a job claimed ahead did not start, nothing more
  is claimed ahead until the moving mean has come back under `QUICK`, after several quick
  ends: jobs that turned long would otherwise be claimed and given back over and over.
- On the way out (stop, orphan), and for a type whose breaker may have opened (one of its
  jobs failed here), the jobs of that kind still waiting are given back.
A queue with a rate-limited type claims nothing ahead: its window counts a start at the claim.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobsup.observe.events import emit
from jobsup.worker.lease import HOLD_WAITING

if TYPE_CHECKING:
    from jobsup.store.rows import ClaimedJob
    from jobsup.worker.lease import LeaseKeeper
    from jobsup.worker.pool import Pool
    from jobsup.worker.settler import Settler
    from jobsup.worker.starts import Starts

# Seconds: while the pool's jobs run shorter than this (a moving mean), it claims ahead.
QUICK = HOLD_WAITING / 4
_WEIGHT = 0.1  # of the last job's run in the moving mean


class Ahead:
    """The jobs a pool has claimed and not started yet (those for its free places too, for
    the moment between the claim and their start), and how many it may claim ahead."""

    def __init__(
        self,
        keeper: LeaseKeeper,
        settler: Settler,
        starts: Starts,
        timeout_of: Callable[[ClaimedJob], float | None],
        *,
        size: int,
        allowed: bool,
    ) -> None:
        """`size`: the pool's places; `allowed`: whether this queue may claim ahead at all."""
        self.keeper, self.settler, self.starts, self.timeout_of = keeper, settler, starts, timeout_of
        self.max_depth = size if allowed else 0
        self.typical: float | None = None  # the moving mean of the jobs' runs; None: unknown
        self.jobs: deque[ClaimedJob] = deque()

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def depth(self) -> int:
        """How many jobs to hold claimed ahead now."""
        return self.max_depth if self.typical is not None and self.typical < QUICK else 0

    def ran(self, seconds: float) -> None:
        """Learn from a job that ran for `seconds`."""
        typical = self.typical
        self.typical = seconds if typical is None else typical + _WEIGHT * (seconds - typical)

    def add(self, jobs: list[ClaimedJob]) -> None:
        self.jobs.extend(jobs)

    def start(self, pool: Pool) -> None:
        """Start the jobs claimed (ahead or not) while the pool has places."""
        while pool.free and self.jobs:
            job = self.jobs.popleft()
            running = self.keeper.begin(job, self.timeout_of(job))
            if running is None:  # given back (it waited too long), or the worker is ending
                emit("job.skipped", job=job.id, name=job.name, attempt=job.attempt)
                self.typical = HOLD_WAITING  # long: claim ahead again after several quick ends
                continue
            self.starts.announce(running)
            pool.start(running)

    def give_back(self, name: str | None = None) -> None:
        """Give back every job waiting, or those of type `name`."""
        if name is None:
            jobs, self.jobs = list(self.jobs), deque()
        else:
            jobs = [job for job in self.jobs if job.name == name]
            self.jobs = deque(job for job in self.jobs if job.name != name)
        if jobs:
            # Only those still waiting: the lease thread may have given some back already.
            self.settler.release(self.keeper.take_waiting(jobs))
            self.settler.flush_soon()
