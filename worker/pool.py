"""Running several jobs of one worker at once (a queue's ``concurrency``): plain functions
on a pool of threads, ``async def`` functions on the worker's event loop. Each job keeps
everything it has when run alone (its lease, fenced on owner and attempt; its timeout and
cancel event, enforced by the lease threads; its attempt's row when it ends); the pool only runs the calls
and hands what they did back to the main thread, which settles them. A finished call pokes
a pipe the main thread waits on with the rest of its wakeups.
"""

from __future__ import annotations

import contextlib
import os
import queue
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from jobsup.store.rows import FAILED
from jobsup.worker.execute import Ran, call, call_async, prepare
from jobsup.worker.lease import Running

if TYPE_CHECKING:
    from jobsup.worker.aio import EventLoop
    from jobsup.worker.services import JobServices


class Pool:
    def __init__(self, size: int, loop: EventLoop, services: JobServices | None = None) -> None:
        self.size, self.loop, self.services = size, loop, services
        self.threads = ThreadPoolExecutor(max_workers=size, thread_name_prefix="jobsup-job")
        self.finished: queue.SimpleQueue[tuple[Running, Ran]] = queue.SimpleQueue()
        self.read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.running = 0  # started and not yet collected
        # Whether the pipe was poked since the main thread last emptied it: calls finishing
        # close together wake it once, not once each.
        self._poked = False

    @property
    def free(self) -> int:
        return self.size - self.running

    def start(self, running: Running) -> None:
        self.running += 1
        job = running.job
        prepared = prepare(job, running.cancelled, self.services)
        if isinstance(prepared, Ran):
            self._done(running, prepared)
            return
        future: Future[Ran]
        if prepared.is_async:
            with running.traced.current():  # the task takes the context of the submitting thread
                future, cancel = self.loop.submit(call_async(job, prepared))
            running.hook(cancel)
        else:
            future = self.threads.submit(running.traced.wrap(call), job, prepared)
        future.add_done_callback(lambda future: self._done(running, _ran(future)))

    def collect(self) -> list[tuple[Running, Ran]]:
        """The calls that finished since the last look (main thread)."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self.read_fd, 4096):
                pass
        # Cleared after the pipe is empty and before the queue is read: a call that finds it
        # still set has put its outcome in the queue already, so the reads below get it.
        self._poked = False
        done = []
        while True:
            try:
                done.append(self.finished.get_nowait())
            except queue.Empty:
                break
        self.running -= len(done)
        return done

    def _done(self, running: Running, ran: Ran) -> None:
        # From a pool thread, the loop's thread or the main thread. Returned: nothing to time
        # out or cancel any more, however long the main thread takes to write its outcome.
        running.returned = True
        self.finished.put((running, ran))
        if not self._poked:
            self._poked = True
            with contextlib.suppress(BlockingIOError):
                os.write(self._write_fd, b"!")


def _ran(future: Future[Ran]) -> Ran:
    try:
        return future.result()
    except BaseException as exc:  # call() does not raise; should it, the job is still settled
        return Ran(FAILED, f"{type(exc).__name__}: the job's call failed")
