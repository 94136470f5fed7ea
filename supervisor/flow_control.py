"""The maintenance steps of flow control (see `jobsup.supervisor.maintenance`): circuit
breakers whose reset has passed let one probe through, and jobs past an SLA deadline are
marked. Both are compare-and-sets, safe on every instance at once."""

from __future__ import annotations

from datetime import datetime

from jobsup.observe import metrics
from jobsup.store import Store


class HalfOpenBreakers:
    """open -> half_open once the reset has passed, with one probe named; and the
    `jobsup_breaker_state` gauge of every breaker."""

    name = "breakers"

    def __init__(self, store: Store) -> None:
        self.store = store

    def run_once(self, now: datetime | None = None) -> int:
        changed = self.store.breakers.half_open(now=now)
        metrics.set_breaker_states(self.store.breakers.states())
        return len(changed)


class MarkSlaBreaches:
    """Mark the jobs past an SLA deadline, each once (`jobsup.store.sla`)."""

    name = "sla"

    def __init__(self, store: Store, batch: int = 500, max_batches: int = 10) -> None:
        self.store, self.batch, self.max_batches = store, batch, max_batches

    def run_once(self, now: datetime | None = None) -> int:
        return self.store.sla.mark(now=now, batch=self.batch, max_batches=self.max_batches)
