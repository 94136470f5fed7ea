"""How many jobs a worker's next claim asks for.

A given ``claim_batch`` is used every time. Without one the size adapts: one job while the
queue is shallow (a claim came back short), so a trickle goes to whichever worker is free;
twice as many after a full claim whose jobs all ran here within half of `HOLD_WAITING` (from
one, after two such claims in a row: a queue two jobs deep is not yet a backlog), so a
backlog of short jobs drains at a batch's cost per job (up to `ADAPTIVE_MOST`); half as
many after a batch that took `HOLD_WAITING` or longer, and one after a batch some of whose
jobs did not run here (released while they waited behind a long one, cancelled, or the
worker stopping). The jobs of a batch wait for the ones before them, so the size is held to
about what runs in `HOLD_WAITING`: growing on long jobs would claim jobs only to give them
back a second later, each leaving a released attempt behind.
"""

from __future__ import annotations

from jobsup.worker.lease import HOLD_WAITING

# The most an adaptive claim takes at once. Measured beside PgQueuer on 2026-12-05 (CPU per
# 1,000 no-op jobs, 2 workers, PostgreSQL, two alternated rounds): 171-193 ms at 16, 121-157
# at 32, 118-125 at a fixed 100.
ADAPTIVE_MOST = 32


class ClaimSize:
    def __init__(self, given: int | None, *, one_at_a_time: bool = False) -> None:
        """`given`: the configured claim batch (None: adapt); `one_at_a_time`: always one
        (a queue with a rate-limited type, whose window counts a start at the claim)."""
        self.adaptive = given is None and not one_at_a_time
        self.most = 1 if one_at_a_time else (ADAPTIVE_MOST if given is None else given)
        self.size = 1 if given is None or one_at_a_time else given
        self.quick = 0  # full claims in a row whose jobs all ran here quickly

    def after(self, claimed: int, ran: int, seconds: float) -> None:
        """Learn from a claim of `claimed` jobs, `ran` of which ran here, in `seconds`
        from the claim to the end of the last."""
        if not self.adaptive:
            return
        if claimed < self.size or ran < claimed:
            self.size, self.quick = 1, 0
        elif seconds >= HOLD_WAITING:
            self.size, self.quick = max(1, self.size // 2), 0
        elif 2 * seconds < HOLD_WAITING:
            # A short job and then a long one (one claimed with the other) would have the
            # second wait, then be released: a second quick claim first says it is a backlog.
            self.quick += 1
            if self.size > 1 or self.quick >= 2:
                self.size = min(2 * self.size, self.most)
