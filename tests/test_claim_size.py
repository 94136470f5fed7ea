"""How many jobs a worker's next claim asks for (`jobsup.worker.claimsize`)."""

from __future__ import annotations

from jobsup.worker.claimsize import ADAPTIVE_MOST, ClaimSize
from jobsup.worker.lease import HOLD_WAITING


def test_a_backlog_of_short_jobs_doubles_the_claim_up_to_the_most() -> None:
    size = ClaimSize(None)
    seen = [size.size]
    for _ in range(8):
        size.after(size.size, size.size, 0.01)
        seen.append(size.size)
    assert seen == [1, 1, 2, 4, 8, 16, 32, 32, 32] and ADAPTIVE_MOST == 32  # from one: two quick claims


def test_a_short_claim_goes_back_to_one() -> None:
    size = ClaimSize(None)
    size.after(1, 1, 0.01)
    size.after(1, 1, 0.01)
    size.after(2, 2, 0.01)
    assert size.size == 4
    size.after(3, 3, 0.01)  # the queue ran dry
    assert size.size == 1
    size.after(0, 0, 0.0)  # nothing there
    assert size.size == 1


def test_a_batch_whose_jobs_did_not_all_run_here_goes_back_to_one() -> None:
    size = ClaimSize(None)
    for _ in range(4):
        size.after(size.size, size.size, 0.01)
    assert size.size == 8
    size.after(8, 7, 0.3)  # one was released while it waited, or cancelled
    assert size.size == 1


def test_long_jobs_are_claimed_one_at_a_time_and_a_slow_batch_halves() -> None:
    size = ClaimSize(None)
    size.after(1, 1, HOLD_WAITING * 5)  # one five-second job
    assert size.size == 1
    size.after(1, 1, 0.01)  # a short one after it: one quick claim is not yet a backlog
    assert size.size == 1
    for _ in range(4):
        size.after(size.size, size.size, 0.01)
    assert size.size == 16
    size.after(16, 16, HOLD_WAITING * 1.6)  # 100 ms jobs: 16 take 1.6 s
    assert size.size == 8
    size.after(8, 8, HOLD_WAITING * 0.8)  # 8 take 0.8 s: doubling would pass the second
    assert size.size == 8


def test_a_given_size_is_kept_and_a_rate_limited_queue_claims_one() -> None:
    given = ClaimSize(10)
    given.after(3, 1, 9.0)
    assert given.size == 10
    rated = ClaimSize(None, one_at_a_time=True)
    rated.after(1, 1, 0.01)
    assert rated.size == 1 and ClaimSize(50, one_at_a_time=True).size == 1
