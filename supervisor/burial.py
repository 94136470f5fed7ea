"""What the supervisor writes after a worker died: its leases, closed at once by
compare-and-set, each as the worker's exit and slot say, from a thread of its own. The
rules: docs/internals.md, "Burials".
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from jobsup import exits
from jobsup.observe.events import emit
from jobsup.store.rows import LEASE_EXPIRED, RELEASED, TIMED_OUT
from jobsup.store.transitions import Transitions
from jobsup.supervisor.children import Death
from jobsup.supervisor.guard import report_errors

MAX_DELAY = 10.0


@dataclass(eq=False)  # each burial is itself: found and removed by identity
class Burial:
    owner: str
    worker: str
    charged: dict[int, tuple[int, str, str]]  # job id -> (attempt, how it ends, error)
    lapses_at: float  # monotonic: after this the sweep does it
    next_try: float = 0.0
    delay: float = 0.5


def burial_of(death: Death, lease: float) -> Burial:
    child = death.child
    charged = {}
    ended_itself = death.code in (exits.LEASE_LOST, exits.TIMED_OUT, exits.SHUTDOWN_FORCED)
    for job_id, attempt, timeout, ends in death.running:
        kind, error = _ending(ends if ended_itself and ends else death.code, death, timeout)
        charged[job_id] = (attempt, kind, error)
    # Tried until the freshest lease of a job it ran lapses: a job claimed after an outage
    # holds a lease fresher than the last renewal, and trying past a lapse is harmless (the
    # write matches only this dead owner's leases).
    good_as_of = death.leases_good_as_of or child.started
    return Burial(child.worker_id, child.slot.label, charged, lapses_at=good_as_of + lease)


def _ending(code: int | None, death: Death, timeout: float | None) -> tuple[str, str]:
    """How a running job's attempt ends, given the exit code that speaks for it: the
    worker's own (it ended itself for this job) or the process's."""
    if code == exits.TIMED_OUT:
        after = f" after {timeout:g}s" if timeout is not None else ""
        return TIMED_OUT, f"timed out{after} and ignored cancellation; its worker was ended"
    if code == exits.SHUTDOWN_FORCED:
        return RELEASED, ""
    return LEASE_EXPIRED, f"lease expired: its worker {exits.describe(death.status)}"


class Burials:
    def __init__(self, transitions: Transitions) -> None:
        self.transitions = transitions
        self.pending: list[Burial] = []
        self.changed = threading.Condition()  # guards `pending` and `closed`; wakes the thread
        self.closed = False  # at shutdown: the thread stops once `finish` has given up
        self.thread: threading.Thread | None = None

    def add(self, burial: Burial) -> None:
        with self.changed:
            closed = self.closed
            if not closed:
                self.pending.append(burial)
                self.changed.notify()
        if closed:  # after `finish`: nothing writes it now; the sweep will
            emit("burial.abandoned", worker=burial.worker, owner=burial.owner, reason="the supervisor stopped")
            return
        if self.thread is None:
            self.thread = threading.Thread(target=self._write_forever, name="jobsup-burials", daemon=True)
            self.thread.start()

    def finish(self, grace: float) -> None:
        """At shutdown: let the thread keep retrying the burials still pending (a brief
        outage must not leave a released job running for a whole lease) for `grace`
        seconds, then say which were given up; the sweep closes those once their leases
        lapse. A statement hanging on a dead connection cannot stretch the shutdown: the
        thread is left to it (a write already under way may still land after; it is a
        compare-and-set, so it changes only what the sweep would have)."""
        deadline = time.monotonic() + grace
        with self.changed:
            for burial in self.pending:  # now, and briskly: the backoff was for a supervisor that lives on
                burial.next_try, burial.delay = 0.0, 0.5
            self.changed.notify()
            while self.pending and time.monotonic() < deadline:
                self.changed.wait(max(0.0, deadline - time.monotonic()))
            self.closed = True
            given_up, self.pending = self.pending, []
            self.changed.notify()
        for burial in given_up:
            emit("burial.abandoned", worker=burial.worker, owner=burial.owner, reason="the supervisor stopped")

    def _write_forever(self) -> None:
        while True:
            with self.changed:
                due = self._due()
                while not self.closed and not due:
                    next_try = min((burial.next_try for burial in self.pending), default=None)
                    self.changed.wait(None if next_try is None else max(0.0, next_try - time.monotonic()))
                    due = self._due()
                if self.closed:
                    return
            for burial in due:
                self._try(burial)

    def _due(self) -> list[Burial]:
        now = time.monotonic()
        return [burial for burial in self.pending if now >= burial.next_try]

    def _try(self, burial: Burial) -> None:
        with self.changed:
            if self.closed or burial not in self.pending:  # given up by `finish` meanwhile
                return
        closed = report_errors("expire_lease", lambda: self._write(burial), worker=burial.worker)
        now, lapsed = time.monotonic(), False
        with self.changed:
            if burial not in self.pending:  # given up by `finish` while it was being written
                return
            if closed is not None or now >= burial.lapses_at:
                self.pending.remove(burial)
                lapsed = closed is None
            else:
                burial.next_try, burial.delay = now + burial.delay, min(burial.delay * 2, MAX_DELAY)
            self.changed.notify_all()  # `finish` may be waiting for the list to empty
        if lapsed:
            emit("burial.abandoned", worker=burial.worker, owner=burial.owner, reason="its lease lapsed")

    def _write(self, burial: Burial) -> int:
        return self.transitions.sweep.expire_owner(burial.owner, burial.charged)
