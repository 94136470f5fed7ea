"""What every command that touches the database shares: `--database-url` and `--config`,
accepted before the subcommand (``jobsup --database-url URL jobs list``) and after it, the
one after winning; and the parsers of the operator's input."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from jobsup.errors import BadInput, JobsupError
from jobsup.settings import Settings, load

if TYPE_CHECKING:
    from jobsup.client import Client


class NotFound(JobsupError):
    """Nothing matched (exit status 1)."""


@dataclass(frozen=True)
class Target:
    """The database a command works on, as the command line and the settings say."""

    database_url: str | None
    config: Path | None

    def settings(self, **overrides: Any) -> Settings:
        return load({"database_url": self.database_url, **overrides}, config=self.config)

    def client(self) -> Client:
        from jobsup.client import Client

        return Client(self.settings().database_url)


def database_url_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--database-url", help="Default: the configured one, else sqlite:///jobsup.db.")(f)


def config_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--config", type=click.Path(path_type=Path), help="A settings file (default: ./jobsup.toml or pyproject.toml)."
    )(f)


def with_target(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give `command` a `target` from its own --database-url/--config, else the group's."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        database_url, config = kwargs.pop("database_url"), kwargs.pop("config")
        given = click.get_current_context().find_root().obj or {}
        target = Target(database_url or given.get("database_url"), config or given.get("config"))
        return command(target, *args, **kwargs)

    return database_url_option(config_option(wrapper))


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
# Every command that changes something is audited (`jobsup audit`); None: the OS user.
actor_option = click.option("--actor", help="Who to record in the audit trail (default: os:<your user>).")


def parse_payload(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BadInput(f"--payload is not valid JSON: {exc}") from None


def parse_instant(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadInput(f"--run-at {text!r} is not an ISO 8601 time like 2030-01-01T09:00:00+00:00") from None
    if moment.tzinfo is None:
        raise BadInput(f"--run-at {text!r} has no time zone: add one, e.g. +00:00 or Z")
    return moment
