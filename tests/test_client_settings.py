"""A `Client` (and an `AsyncClient`) reads the settings even when given a database URL, so
that a process whose settings name an events publisher writes the outbox whichever way it
built its client; a broken ``jobsup.toml`` is then the same one clear line as for the CLI."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobsup
from jobsup.errors import ConfigurationError
from jobsup.events import hooks, publishing

from helpers import run_jobsup

BROKEN = {
    "not TOML": "events_publisher = \n",
    "an unknown setting": 'retain_finishd = "3d"\n',
    "a bad publisher": 'events_publisher = "ftp://nope"\n',
}


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JOBSUP_CONFIG", raising=False)
    monkeypatch.delenv("JOBSUP_EVENTS_PUBLISHER", raising=False)
    yield tmp_path
    hooks.clear()  # the outbox off again for the other tests


@pytest.mark.parametrize("broken", BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_jobsup_toml_is_the_same_one_line_for_a_client_with_a_url_as_for_the_cli(
    folder: Path, sqlite_url: str, broken: str
) -> None:
    (folder / "jobsup.toml").write_text(broken)
    with pytest.raises(ConfigurationError) as raised:
        jobsup.Client(sqlite_url)
    message = str(raised.value)
    assert "\n" not in message
    with pytest.raises(ConfigurationError, match="^" + message.replace("(", r"\(").replace(")", r"\)")[:40]):
        jobsup.AsyncClient(sqlite_url)
    cli = run_jobsup("jobs", "list", cwd=folder, env={"JOBSUP_DATABASE_URL": sqlite_url})
    assert cli.returncode != 0 and cli.stderr.strip().splitlines() == [f"jobsup: {message}"]


@pytest.mark.parametrize("make", ["client", "async client"])
def test_a_publisher_in_the_settings_turns_the_outbox_on_for_a_client_given_a_url(
    folder: Path, sqlite_url: str, make: str
) -> None:
    (folder / "jobsup.toml").write_text('events_publisher = "amqp://guest:guest@127.0.0.1:5672/"\n')
    publishing.disable()
    if make == "client":
        jobsup.Client(sqlite_url).close()
    else:
        asyncio.run(jobsup.AsyncClient(sqlite_url).close())
    assert publishing.enabled()
