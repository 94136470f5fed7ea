"""Testing an application's jobs with jobsup.testing, without `jobsup start`: run with
`pytest` in this folder (jobsup's tests run it so: tests/test_testing_helpers.py)."""

import pytest
import shop

import jobsup
from jobsup.testing import assert_enqueued, drain, inline, refute_enqueued, run_job


def test_checkout_enqueues_the_order(jobsup_client: jobsup.Client) -> None:
    shop.checkout(jobsup_client, 7, "ann@example.com")
    assert_enqueued(jobsup_client, "place-order", {"order": 7}, status="pending")
    refute_enqueued(jobsup_client, "send-receipt")  # nothing has run yet


def test_draining_runs_the_order_and_the_receipt_it_enqueues(jobsup_client: jobsup.Client) -> None:
    order = shop.checkout(jobsup_client, 7, "ann@example.com")
    assert drain(jobsup_client) == {"succeeded": 2}
    assert jobsup_client.wait(order).result == {"order": 7}  # finished: returns at once
    receipt = assert_enqueued(jobsup_client, "send-receipt", {"email": "ann@example.com"}, queue="mail")
    assert receipt.status == "succeeded"
    assert [line.message for line in jobsup_client.logs(receipt.id)] == ["receipt for order 7"]


def test_a_failing_receipt_is_retried_then_dead_lettered(jobsup_client: jobsup.Client) -> None:
    shop.checkout(jobsup_client, 8, "bob@invalid")
    counts = drain(jobsup_client, with_scheduled=True)  # retries run now, not after their delay
    assert counts == {"succeeded": 1, "failed": 3, "dead_lettered": 1}
    receipt = assert_enqueued(jobsup_client, "send-receipt", status="dead_lettered")
    assert receipt.last_error == "ValueError: cannot send to bob@invalid"


def test_inline_runs_jobs_as_they_are_enqueued(jobsup_client: jobsup.Client) -> None:
    with inline(jobsup_client) as counts:
        order = shop.checkout(jobsup_client, 9, "cy@example.com")
        assert jobsup_client.wait(order, timeout=0).status == "succeeded"  # already run
    assert counts == {"succeeded": 2}


def test_one_job_function_by_itself() -> None:
    with pytest.raises(ValueError, match="cannot send to x@invalid"):
        run_job("send-receipt", {"order": 1, "email": "x@invalid"})
    assert run_job("send-receipt", {"order": 1, "email": "x@example.com"}) == {"sent_to": "x@example.com"}
    with pytest.raises(jobsup.BadInput, match="order"):
        run_job("place-order", {"order": "seven", "email": "x@example.com"})  # its typed parameters are checked
