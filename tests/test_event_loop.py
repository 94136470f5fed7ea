"""The worker's event loop for async jobs (`jobsup.worker.aio`)."""

from __future__ import annotations

import contextvars
import threading

from jobsup.store.rows import SUCCEEDED
from jobsup.worker.aio import EventLoop
from jobsup.worker.execute import Ran

current: contextvars.ContextVar[str] = contextvars.ContextVar("current")


async def seen() -> Ran:
    return Ran(SUCCEEDED, result=current.get())


def test_tasks_handed_over_together_each_run_in_the_context_of_their_own_submit() -> None:
    loop = EventLoop()
    gate = threading.Event()
    loop._started().call_soon_threadsafe(gate.wait)  # the loop's thread waits: the submits below go over as one
    futures = []
    for value in ("first", "second", "third"):
        token = current.set(value)  # as a job's run span is current when the pool submits it
        futures.append(loop.submit(seen())[0])
        current.reset(token)
    gate.set()
    assert [future.result(timeout=10).result for future in futures] == ["first", "second", "third"]
