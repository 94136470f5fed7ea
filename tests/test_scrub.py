"""Scrubbing masks what is secret, not what is named (security review 2026-12-03 finding 4,
newcomer review F7): sensitive values in every encoding a library quotes them in and
truncated, credential-shaped text; never payload keys or ordinary short values."""

from __future__ import annotations

import base64
import json
import threading
from typing import Annotated
from urllib.parse import quote, quote_plus

import pydantic
import pytest

import jobsup
from jobsup.scrub import error_text, scrub, secrets_of
from jobsup.store.rows import ClaimedJob
from jobsup.worker.execute import execute

TOKEN = "Zm9v+YmFy/c2VjcmV0=="
LONG_TOKEN = "sk_live_51HkQeRTYvX2cZpLmNoPqRsTuVwXyZaB3dE6fG9hK0LmNoPqRsTuV"


@pytest.mark.parametrize(
    ("encoding", "shown"),
    [
        ("as given", TOKEN),
        ("percent-encoded", quote(TOKEN, safe="")),
        ("percent-encoded, / kept", quote(TOKEN)),
        ("plus-encoded", quote_plus(TOKEN)),
        ("base64", base64.b64encode(TOKEN.encode()).decode()),
        ("url-safe base64 unpadded", base64.urlsafe_b64encode(TOKEN.encode()).decode().rstrip("=")),
        ("hex", TOKEN.encode().hex()),
        ("HEX", TOKEN.encode().hex().upper()),
        ("first 12 characters", TOKEN[:12] + "..."),
        ("last 9 characters", "..." + TOKEN[-9:]),
        ("repr", repr(TOKEN)),
    ],
)
def test_a_sensitive_value_is_masked_in_every_encoding(encoding: str, shown: str) -> None:
    secrets = secrets_of({"account": "acme", "token": TOKEN}, {"token"})
    text = scrub(f"404 for url 'http://127.0.0.1/v1/charge?account=acme&t={shown}' (see log)", secrets)
    assert text.startswith("404 for url 'http://127.0.0.1/v1/charge?account=acme&t=") and "***" in text, encoding
    assert shown.strip(".") not in text and text.endswith(" (see log)"), text


def test_a_truncated_copy_as_pydantic_shows_it_is_masked() -> None:
    secrets = secrets_of({"token": LONG_TOKEN}, {"token"})
    shown = f"input_value='{LONG_TOKEN[:24]}...{LONG_TOKEN[-24:]}', input_type=str"
    assert scrub(shown, secrets) == "input_value=***...***, input_type=str"


def test_keys_and_ordinary_short_values_are_no_longer_masked() -> None:
    secrets = secrets_of({"order": 1234, "table": "b", "note": "retry later"})
    error = RuntimeError("502 Bad Gateway for order 1234; table b: column 'amount' has 3 NULLs")
    assert error_text(error, secrets) == (
        "RuntimeError: 502 Bad Gateway for order 1234; table b: column 'amount' has 3 NULLs"
    )


def test_long_payload_strings_are_still_masked_as_exact_copies() -> None:
    secrets = secrets_of({"card": "4111111111111111", "to": "alice@example.com"})
    assert error_text(ValueError("ALICE@EXAMPLE.COM: card 4111111111111111 declined"), secrets) == (
        "ValueError: ***: card *** declined"
    )


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("cannot reach postgresql://jobs:Hunter2pw@db:5432/jobs", "cannot reach postgresql://jobs:***@db:5432/jobs"),
        ("Authorization: Bearer eyJhbGciOi.x.y rejected", "Authorization: Bearer *** rejected"),
        ("{'authorization': 'Basic dXNlcjpwYXNz'}", "{'authorization': 'Basic ***'}"),
        ("sent bearer abcdefgh12345 to the API", "sent bearer *** to the API"),
        ("GET /login?user=kim&password=p4ssw0rd&x=1", "GET /login?user=kim&password=***&x=1"),
        ('{"api_key": "AKIAABCDEFGH"}', '{"api_key": "***"}'),
        # A scheme glued to what stands before it (the scheme is matched as at most 32
        # characters, so a long glued run is kept in clear before it, the password masked).
        ("connecting...redis://u:pw123456@h", "connecting...redis://u:***@h"),
        ("1redis://u:pw123456@h", "1redis://u:***@h"),
        ("%22postgresql+psycopg://u:pw123456@h", "%22postgresql+psycopg://u:***@h"),
        (
            "could-not-connect-to-the-database-postgresql://u:pw123456@h",
            "could-not-connect-to-the-database-postgresql://u:***@h",
        ),
        ("a" * 40 + "redis://u:pw123456@h", "a" * 40 + "redis://u:***@h"),
    ],
)
def test_credential_shaped_text_is_masked_whatever_the_payload(text: str, masked: str) -> None:
    assert scrub(text, secrets_of(None)) == masked


class ApiCall(pydantic.BaseModel):
    account: str
    token: Annotated[str, pydantic.Field(max_length=40), jobsup.Sensitive]


@jobsup.job("scrub-api-call", params=ApiCall, max_attempts=1)
def api_call(ctx: jobsup.JobContext, params: ApiCall) -> None:
    raise AssertionError("not reached: the parameters do not build")


def test_a_typed_jobs_validation_error_never_stores_a_sensitive_input() -> None:
    # As a worker sees a job enqueued by a process without the code (the schema has no maxLength).
    payload = json.dumps({"account": "acme", "token": LONG_TOKEN})
    outcome = execute(ClaimedJob(1, "scrub-api-call", "default", payload, 1, 1, None, None, "w"), threading.Event())
    assert outcome.kind == "failed"
    assert outcome.error == "ValidationError: field 'token': string_too_long"


def test_an_enqueue_whose_parameters_do_not_build_names_the_field_not_the_value() -> None:
    from jobsup.registry import lookup
    from jobsup.store.builder import build

    registered = lookup("scrub-api-call")
    assert registered is not None
    with pytest.raises(jobsup.InvalidPayload) as caught:
        build(registered.type, {"account": "acme", "token": LONG_TOKEN}, {})
    assert str(caught.value) == (
        "payload of job 'scrub-api-call' does not build its parameters: ValidationError: field 'token': string_too_long"
    )
