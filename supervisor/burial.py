"""What the supervisor writes after a worker died: the worker's leases, closed at once so its
jobs do not wait out the lease (a compare-and-set on owner and attempt, so a job it already
settled or released is not touched).

The worker's slot says which jobs it was running; the exit says how their attempts end
(unless the slot entry says otherwise: a worker running several jobs that ends itself for
one of them marks how each of the others ends, released unless it was cancelled too):

- it ended itself because its job ignored the timeout's cancellation: `timed_out`, retried
  like a failure;
- it ended itself because its job ignored shutdown: released (the attempt does not count);
- anything else (killed, crashed, out of memory, lease lost): `lease_expired`.

Every other lease it held was a job waiting in its claimed batch, or an outcome it had not
written yet: released. Written only now that the process is dead, so the job's row never
changes while its function may still run. If the database cannot be reached, the burial is
retried with backoff until it is written or the lease lapses (then the sweep of any instance
closes it).
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


@dataclass
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
    renewed = child.slot.memory.renewed_at or child.started
    return Burial(child.worker_id, child.slot.label, charged, lapses_at=renewed + lease)


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

    def add(self, burial: Burial) -> None:
        self.pending.append(burial)
        self.run_due()

    def run_due(self) -> None:
        now = time.monotonic()
        for burial in list(self.pending):
            if now < burial.next_try:
                continue
            closed = report_errors("expire_lease", lambda b=burial: self._write(b), worker=burial.worker)  # type: ignore[misc]
            if closed is not None:
                self.pending.remove(burial)
            elif now >= burial.lapses_at:
                self.pending.remove(burial)
                emit("burial.abandoned", worker=burial.worker, owner=burial.owner, reason="its lease lapsed")
            else:
                burial.next_try, burial.delay = now + burial.delay, min(burial.delay * 2, MAX_DELAY)

    def finish(self, grace: float) -> None:
        """At shutdown: keep retrying the burials still pending (a brief outage must not
        leave a released job running for a whole lease) for `grace` seconds, then say which
        were given up; the sweep closes those once their leases lapse. The retries run in a
        thread, so a statement hanging on a dead connection cannot stretch the shutdown."""
        if not self.pending:
            return
        deadline = time.monotonic() + grace
        done = threading.Event()

        def retry() -> None:
            while self.pending and time.monotonic() < deadline:
                self.run_due()
                time.sleep(0.1)
            done.set()

        threading.Thread(target=retry, name="jobsup-burials", daemon=True).start()
        done.wait(grace + 0.2)
        for burial in list(self.pending):
            emit("burial.abandoned", worker=burial.worker, owner=burial.owner, reason="the supervisor stopped")

    def _write(self, burial: Burial) -> int:
        return self.transitions.sweep.expire_owner(burial.owner, burial.charged)
