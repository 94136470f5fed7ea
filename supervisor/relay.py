"""The outbox relay: a thread of the supervisor that delivers outbox events to the
configured publisher, safe on every instance at once.

Each turn claims a batch of deliverable events (`jobsup.store.outbox`: the head event of
each job, so a job's events go out in order), publishes them one by one with the
destination's confirmation, deleting them as they are confirmed (20 at a time), and gives back what
it did not send (at half the claim's lease at the latest). Delivery is at least once: a
relay that dies between a publish and its delete leaves its claim to lapse, and another
relay sends that event again (same event id). While the destination fails,
the relay backs off (exponentially, with jitter, up to `MAX_BACKOFF`); the failure is logged
when it starts or changes, and counted every time, and its recovery is logged once. An event
the destination refuses for good (`PublishFailed.permanent`) is parked at once, logged and
counted, and the batch goes on: one bad event never stalls the others.
"""

from __future__ import annotations

import random
import threading
import time
from datetime import datetime

from jobsup.events.publishers import Publisher, PublishFailed
from jobsup.observe.events import emit
from jobsup.store.outbox import Outbox

POLL = 0.2  # seconds between looks when the outbox was empty
BATCH = 200
LEASE = 60.0  # seconds a claim holds events; a batch stops publishing at half of it
FIRST_BACKOFF, MAX_BACKOFF = 0.5, 15.0
DELETE_EVERY = 20  # confirmed events deleted together (one statement each 20, not each one)
FAILURES_IN_A_ROW = 3  # transient failures in one batch before the relay backs off


class Relay:
    def __init__(
        self, outbox: Outbox, publisher: Publisher, owner: str, *, batch: int = BATCH, lease: float = LEASE
    ) -> None:
        self.outbox, self.publisher, self.owner, self.batch, self.lease = outbox, publisher, owner, batch, lease
        self.backoff = 0.0  # seconds to wait after the last failure; 0 while delivering
        self.failing: str | None = None  # the failure last logged
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._relay_forever, name="jobsup-relay", daemon=True)
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout)
            if self.thread.is_alive():  # mid-publish: its client is not ours to close from here
                return
        self.publisher.close()

    def _relay_forever(self) -> None:
        while not self.stopping.is_set():
            try:
                delivered = self.run_once()
            except Exception as exc:  # a database error (or a publisher's bug): logged, counted, backed off
                emit("relay.failed", exc=exc, error=f"{type(exc).__name__}: {exc}")
                self.backoff = min(MAX_BACKOFF, max(FIRST_BACKOFF, self.backoff * 2))
                delivered = 0
            if self.backoff:
                self.stopping.wait(self.backoff * random.uniform(0.8, 1.0))
            elif delivered < self.batch:
                self.stopping.wait(POLL)

    def run_once(self, now: datetime | None = None) -> int:
        """One batch: claim, publish in order, delete what went out, give back the rest.
        Returns how many were delivered."""
        pending = self.outbox.claim(self.owner, limit=self.batch, lease=self.lease, now=now)
        if not pending:
            self.publisher.idle()
            return 0
        done: list[int] = []
        tried = 0  # how many of `pending` went out, or were given back as failed
        failing = 0  # transient failures in a row: past FAILURES_IN_A_ROW the destination is down
        # A slow destination must not keep the batch past its lease, when another relay would
        # take and send it all again: what is left then is given back.
        stop_at = time.monotonic() + self.lease / 2
        try:
            for each in pending:
                if time.monotonic() > stop_at or failing >= FAILURES_IN_A_ROW:
                    break
                try:
                    self.publisher.publish(each)
                except PublishFailed as exc:
                    self.outbox.failed(self.owner, each.id, str(exc), park=exc.permanent, now=now)
                    tried += 1
                    if exc.permanent:
                        kind = self.publisher.kind
                        emit("events.parked", publisher=kind, event=each.type, outbox_id=each.id, error=str(exc))
                    else:
                        # The next head is another object's: one event failing for its own
                        # reasons must not hold up the rest, and a destination that is down
                        # fails them all within a few tries.
                        failing += 1
                        self._failed(str(exc))
                    continue
                done.append(each.id)
                tried, failing = tried + 1, 0
                if len(done) % DELETE_EVERY == 0:  # soon after confirmed: a lapse resends few
                    self.outbox.delivered(done[-DELETE_EVERY:])
            if done:
                self._recovered()
        finally:
            self.outbox.delivered(done[len(done) - len(done) % DELETE_EVERY :])
            self.outbox.release(self.owner, [each.id for each in pending[tried:]])
        if done:
            emit("events.delivered", publisher=self.publisher.kind, count=len(done))
        return len(done)

    def _failed(self, why: str) -> None:
        self.backoff = min(MAX_BACKOFF, max(FIRST_BACKOFF, self.backoff * 2))
        # Counted every time; logged when the failure starts or changes, not every retry.
        emit(
            "events.publish_failed",
            publisher=self.publisher.kind,
            error=why,
            quiet=True if why == self.failing else None,
        )
        self.failing = why

    def _recovered(self) -> None:
        if self.failing is not None:
            emit("events.publish_recovered", publisher=self.publisher.kind, where=self.publisher.where)
        self.failing, self.backoff = None, 0.0
