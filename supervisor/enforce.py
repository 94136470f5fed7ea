"""The supervisor's lease enforcement, from a thread of its own: it kills a worker running a
job whose lease is overdue (counted from the later of the job's claim and the worker's last
renewal: `Children.overdue`), which is what the worker's own lease threads failed to do (a
job that holds the GIL starves them). It reads only the workers' slots, so neither a slow
database nor a busy supervisor can make it late, and it keeps watching while the supervisor
shuts down. The loop reaps the killed worker, and its burial closes its leases."""

from __future__ import annotations

import threading
import time

from jobsup.observe.events import emit
from jobsup.supervisor.children import Children

TICK = 0.1


class Enforcer:
    def __init__(self, children: Children, lease: float, heartbeat: float) -> None:
        self.children, self.lease, self.heartbeat = children, lease, heartbeat
        self.tick = min(TICK, heartbeat / 4)

    def start(self) -> None:
        threading.Thread(target=self._watch_forever, name="jobsup-enforce", daemon=True).start()

    def _watch_forever(self) -> None:
        while True:
            time.sleep(self.tick)
            try:
                self.run_once(time.monotonic())
            except Exception as exc:  # never let the watch stop
                emit("supervisor.enforce_failed", exc=exc)

    def run_once(self, now: float) -> None:
        for child in self.children.overdue(now, self.lease, self.heartbeat):
            emit("worker.killed_overdue", worker=child.slot.label, pid=child.pid, queue=child.slot.queue)
            self.children.kill(child)
