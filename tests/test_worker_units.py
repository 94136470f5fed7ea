"""The worker's pure parts: what a job's outcome is, and what its stored error shows."""

from __future__ import annotations

import threading

import jobsup
from jobsup.scrub import error_text, secrets_of
from jobsup.store.rows import ClaimedJob
from jobsup.worker.execute import execute


@jobsup.job("units-echo")
def echo(ctx: jobsup.JobContext, payload: object) -> object:
    return payload


def claimed(payload: str, name: str = "units-echo") -> ClaimedJob:
    return ClaimedJob(1, name, "default", payload, 1, 5, None, None, "w")


def test_a_payload_nested_beyond_the_recursion_limit_is_discarded_not_a_crash() -> None:
    outcome = execute(claimed("[" * 100_000 + "]" * 100_000), threading.Event())
    assert outcome.kind == "discarded" and outcome.error is not None and "InvalidPayload" in outcome.error


def test_no_nesting_depth_escapes_as_an_exception() -> None:
    # Somewhere in this range a payload still decodes but is too deep to walk for secrets.
    kinds = {execute(claimed("[" * depth + "]" * depth), threading.Event()).kind for depth in range(800, 1100)}
    assert kinds == {"succeeded", "discarded"}


def test_an_unknown_name_fails_and_a_known_one_succeeds_with_its_result() -> None:
    assert execute(claimed("1", name="units-nobody"), threading.Event()).kind == "failed"
    outcome = execute(claimed('{"a": [1, 2]}'), threading.Event())
    assert (outcome.kind, outcome.result) == ("succeeded", '{"a":[1,2]}')


def test_every_payload_value_and_key_is_masked_in_stored_errors_short_ones_as_words() -> None:
    payload = {"card": "4111111111111111", "cvv": 123, "pin": "42", "amount": 9.5, "flag": True}
    error = ValueError("declined: cvv=123 pin=42 amount=9.5 card=4111111111111111 in 1942, True")
    assert (
        error_text(error, secrets_of(payload)) == "ValueError: declined: ***=*** ***=*** ***=*** ***=*** in 1942, True"
    )


def test_stored_errors_are_capped() -> None:
    assert len(error_text(RuntimeError("x" * 5000), [])) == 2000
