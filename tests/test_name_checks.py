"""Name checks refuse a trailing newline (security review 2026-12-03 finding 9): `$` with
`re.match` also matches before a final newline, so `default\n` was a second queue that
read as `default` everywhere it was shown."""

from __future__ import annotations

import pytest

import jobsup
from jobsup.checks import check_name
from jobsup.errors import BadInput, ConfigurationError
from jobsup.secrets import check_key_id, parse_keys

from webhelpers import OPERATOR, web

KEY = "A" * 43


@pytest.mark.parametrize("name", ["default\n", "default\r\n", "\ndefault", "a" * 200 + "\n"])
def test_a_name_with_a_line_break_is_refused(name: str) -> None:
    with pytest.raises(BadInput, match="is not valid: use 1-200 letters"):
        check_name(name, "queue")


def test_a_key_id_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="is not 1-64 letters"):
        check_key_id("k1\n")
    with pytest.raises(ConfigurationError, match="entry 1 is not id:key"):
        parse_keys(f"k1\n:{KEY}")


def test_the_api_refuses_a_queue_with_a_trailing_newline(url: str) -> None:
    client = jobsup.Client(url)
    with web(url) as http:
        answer = http.post("/api/v1/jobs", json={"name": "a", "queue": "default\n"}, headers=OPERATOR)
    assert answer.status_code == 400, answer.text
    assert client.list_jobs() == []
