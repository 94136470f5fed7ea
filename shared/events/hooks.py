"""In-process hooks: ``@jobsup.on("job.dead_lettered")`` functions, run after the commit of
the change, in the process that made it, never inside its transaction.

A hook runs on a small pool of threads, so neither a slow hook nor a raising one holds up
the transition that announced the event (the job is settled by then either way). A hook
that raises is logged and counted (`hook.failed`); one that runs past its timeout is logged
and counted (`hook.timed_out`) and its thread written off: a replacement thread serves the
other hooks, and the stuck one ends when its hook returns. Both are bounded, so a hook that
hangs forever on every event cannot take the process down with it: at most `MAX_STUCK`
written-off threads at once (past that a stuck thread is not replaced: the pool runs with
fewer until it returns, and then it serves again), and at most `MAX_QUEUED` hook calls
waiting for a thread (past that they are dropped, logged and counted: `hook.dropped`). Hooks are in-process and best
effort: events of a process that dies before they ran are not retried (the outbox and a
publisher are for events that must arrive).
"""

from __future__ import annotations

import copy
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobsup.events import publishing
from jobsup.events.catalogue import check_type
from jobsup.observe.events import emit

Hook = Callable[[dict[str, Any]], object]
THREADS = 4
DEFAULT_TIMEOUT = 30.0
WATCH_EVERY = 0.1
MAX_STUCK = 16  # written-off threads still running their hook
MAX_QUEUED = 10_000  # hook calls waiting for a thread


@dataclass(frozen=True)
class Registered:
    hook: Hook
    timeout: float
    with_exception: bool = False  # it is handed the job's exception object (not plain data)

    @property
    def name(self) -> str:
        return getattr(self.hook, "__qualname__", repr(self.hook))


_hooks: dict[str, list[Registered]] = {}


def on(kind: str, *, timeout: float = DEFAULT_TIMEOUT, with_exception: bool = False) -> Callable[[Hook], Hook]:
    """Register the decorated function to run with each `kind` event (a type of
    `jobsup.events.catalogue.TYPES`; another name raises `BadInput` naming them). With
    `with_exception`, a failure's event settled by the worker that ran the job also holds
    ``exception``, the object the job raised; otherwise every event is plain JSON data."""
    check_type(kind)

    def register(hook: Hook) -> Hook:
        _hooks.setdefault(kind, []).append(Registered(hook, timeout, with_exception))
        publishing.want(kind, dispatch)
        return hook

    return register


def clear() -> None:
    """Forget every hook (tests)."""
    _hooks.clear()
    publishing.disable()


def dispatch(events: list[dict[str, Any]]) -> None:
    """Queue each event for its hooks (called after the commit)."""
    for each in events:
        plain = {key: value for key, value in each.items() if key != "exception"}
        for registered in _hooks.get(each["type"], ()):
            copied = copy.deepcopy(plain)  # one hook's change is not the next one's
            if registered.with_exception and "exception" in each:  # itself, with its traceback
                copied["exception"] = each["exception"]
            _pool().submit(registered, copied)


@dataclass
class _Running:
    registered: Registered
    event: dict[str, Any]
    deadline: float
    timed_out: bool = False
    replaced: bool = False  # another thread took its place: it ends when its hook returns


@dataclass
class _Pool:
    pid: int
    work: queue.Queue[tuple[Registered, dict[str, Any]]] = field(default_factory=lambda: queue.Queue(MAX_QUEUED))
    running: dict[int, _Running] = field(default_factory=dict)  # by thread id
    lock: threading.Lock = field(default_factory=threading.Lock)
    stuck: int = 0  # replaced threads whose hook has not returned yet
    dropped: bool = False  # the last submit was dropped (logged once per run of drops)

    def start(self) -> None:
        for _ in range(THREADS):
            self._thread()
        threading.Thread(target=self._watch, name="jobsup-hooks-watch", daemon=True).start()

    def submit(self, registered: Registered, event: dict[str, Any]) -> None:
        try:
            self.work.put_nowait((registered, event))
        except queue.Full:
            quiet = True if self.dropped else None
            emit("hook.dropped", hook=registered.name, event=event["type"], event_id=event["id"], quiet=quiet)
            self.dropped = True
            return
        self.dropped = False

    def _thread(self) -> None:
        threading.Thread(target=self._serve, name="jobsup-hook", daemon=True).start()

    def _serve(self) -> None:
        me = threading.get_ident()
        while True:
            registered, event = self.work.get()
            with self.lock:
                self.running[me] = _Running(registered, event, time.monotonic() + registered.timeout)
            try:
                registered.hook(event)
            except Exception as exc:
                emit("hook.failed", hook=registered.name, event=event["type"], event_id=event["id"], exc=exc)
            finally:
                with self.lock:
                    replaced = self.running.pop(me).replaced
                    self.stuck -= replaced
            if replaced:
                return

    def _watch(self) -> None:
        while True:
            time.sleep(WATCH_EVERY)
            now = time.monotonic()
            with self.lock:
                late = [run for run in self.running.values() if not run.timed_out and now > run.deadline]
                replaced = 0
                for run in late:
                    run.timed_out = True
                    if self.stuck < MAX_STUCK:
                        run.replaced = True
                        self.stuck += 1
                        replaced += 1
            for run in late:
                emit(
                    "hook.timed_out",
                    hook=run.registered.name,
                    event=run.event["type"],
                    event_id=run.event["id"],
                    timeout=run.registered.timeout,
                )
            for _ in range(replaced):
                self._thread()


_pools: list[_Pool] = []
_pools_lock = threading.Lock()


def _pool() -> _Pool:
    """This process's pool, started on first use (a forked worker starts its own: threads do
    not survive a fork)."""
    pid = os.getpid()
    if _pools and _pools[0].pid == pid:
        return _pools[0]
    with _pools_lock:
        if not _pools or _pools[0].pid != pid:
            pool = _Pool(pid)
            pool.start()
            _pools[:] = [pool]
        return _pools[0]
