"""How much a pool claims ahead of its free places (`jobsup.worker.ahead`): half its size
while its jobs run short, nothing while they run long, before any has run, or on a queue
whose rate window counts a start at the claim."""

from __future__ import annotations

from typing import Any

from jobsup.worker.ahead import QUICK, Ahead


def ahead(size: int = 50, *, allowed: bool = True) -> Ahead:
    unused: Any = None  # giving jobs back and starting them is for the process tests
    return Ahead(unused, unused, unused, unused, size=size, allowed=allowed)


def test_quick_jobs_are_claimed_half_a_pool_ahead_once_one_has_run() -> None:
    pool = ahead()
    assert pool.depth == 0, "nothing is known of the jobs yet"
    pool.ran(0.05)
    assert pool.depth == 25
    assert ahead(2).depth == 0
    small = ahead(2)
    small.ran(0.01)
    assert small.depth == 1


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
