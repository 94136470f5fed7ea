"""How much a pool claims ahead of its free places (`jobsup.worker.ahead`): its size
while its jobs run short, nothing while they run long, before any has run, or on a queue
whose rate window counts a start at the claim."""

from __future__ import annotations

from typing import Any

from jobsup.worker.ahead import QUICK, Ahead


def ahead(size: int = 50, *, allowed: bool = True) -> Ahead:
    unused: Any = None  # giving jobs back and starting them is for the process tests
    return Ahead(unused, unused, unused, unused, size=size, allowed=allowed)


def test_quick_jobs_are_claimed_a_pool_ahead_once_one_has_run() -> None:
    pool = ahead()
    assert pool.depth == 0, "nothing is known of the jobs yet"
    pool.ran(0.05)
    assert pool.depth == 50
    assert ahead(2).depth == 0
    small = ahead(2)
    small.ran(0.01)
    assert small.depth == 2


def test_jobs_that_turn_long_stop_the_claims_ahead_until_they_are_quick_again() -> None:
    pool = ahead()
    pool.ran(0.05)
    pool.ran(30.0)
    assert pool.depth == 0
    runs = 0
    while pool.depth == 0:
        pool.ran(0.05)
        runs += 1
    assert 20 < runs < 60, runs  # a moving mean: one long run is outweighed by some quick ones
    assert pool.typical is not None and pool.typical < QUICK


def test_a_queue_that_may_not_claim_ahead_never_does() -> None:
    pool = ahead(allowed=False)
    pool.ran(0.01)
    assert pool.depth == 0


class Refusing:
    """The lease keeper's answer for a job given back while it waited (`LeaseKeeper.begin`
    returns None), without a database: only what `Ahead.start` asks of it."""

    def begin(self, job: object, timeout: object) -> None:
        return None


class Places:
    free = 1


def test_a_job_claimed_ahead_that_did_not_start_stops_the_claims_ahead_for_several_quick_ends() -> None:
    unused: Any = None
    keeper: Any = Refusing()
    pool = Ahead(keeper, unused, unused, lambda job: None, size=50, allowed=True)
    pool.ran(0.05)
    assert pool.depth == 50
    job: Any = type("Job", (), {"id": 1, "name": "a", "attempt": 1})()
    pool.add([job])
    places: Any = Places()
    pool.start(places)
    assert len(pool) == 0 and pool.depth == 0
    pool.ran(0.05)
    assert pool.depth == 0, "one quick end is not enough after a job waited too long"
    for _ in range(20):
        pool.ran(0.05)
    assert pool.depth == 50
