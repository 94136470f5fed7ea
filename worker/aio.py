"""The worker's event loop for ``async def`` jobs: one thread, started with the first such
job. A job's future completes only once its task has finished, so its outcome is never
written while its code still runs (a cancelled task may still be cleaning up)."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from jobsup.store.rows import FAILED
from jobsup.worker.execute import Ran

Cancel = Callable[[], None]


class EventLoop:
    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.lock = threading.Lock()
        # Tasks to create, handed over together: a claim's jobs wake the loop's thread once.
        self.to_create: collections.deque[Callable[[], None]] = collections.deque()
        self.scheduled = False  # a `_create_all` is on its way to the loop

    def submit(self, coroutine: Coroutine[Any, Any, Ran]) -> tuple[concurrent.futures.Future[Ran], Cancel]:
        """Run `coroutine` as a task, in a copy of the caller's context (its run's span);
        returns its future and a thread-safe cancel. Called from the worker's main thread
        only: a job's create is then always handed to the loop before any cancel of it."""
        loop = self._started()
        context = contextvars.copy_context()  # now: the tasks of one hand-over are created together
        done: concurrent.futures.Future[Ran] = concurrent.futures.Future()
        tasks: list[asyncio.Task[Ran]] = []

        def finished(task: asyncio.Task[Ran]) -> None:
            if task.cancelled():  # before its first step: the job's own code never ran
                done.set_result(Ran(FAILED, "Cancelled: cancelled before it started"))
            elif (exc := task.exception()) is not None:  # call_async does not raise; should it, still settle
                done.set_result(Ran(FAILED, f"{type(exc).__name__}: the job's task failed"))
            else:
                done.set_result(task.result())

        def create() -> None:
            try:
                task = loop.create_task(coroutine, context=context)
            except Exception as exc:  # its job is still settled, and the rest still created
                coroutine.close()
                done.set_result(Ran(FAILED, f"{type(exc).__name__}: the job's task could not start"))
                return
            tasks.append(task)
            task.add_done_callback(finished)

        def cancel() -> None:
            loop.call_soon_threadsafe(lambda: tasks[0].cancel() if tasks else None)

        self.to_create.append(create)
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon_threadsafe(self._create_all)
        return done, cancel

    def _create_all(self) -> None:
        # Cleared before the deque is read: a submit that finds it still set has appended
        # already, so the reads below create its task.
        self.scheduled = False
        while self.to_create:
            self.to_create.popleft()()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self.lock:
            if self.loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="jobsup-async", daemon=True).start()
                self.loop = loop
            return self.loop
