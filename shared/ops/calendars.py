"""`jobsup calendars add|list|show|remove`."""

from __future__ import annotations

import json
from typing import Any

import click

from jobsup.errors import BadInput
from jobsup.ops.options import NotFound, Target, actor_option, json_option, with_target
from jobsup.ops.tables import emit_json, emit_table


@click.group()
def calendars() -> None:
    """Named calendars: blackout windows and allowed hours for schedules and job types."""


@calendars.command("add")
@click.argument("name")
@click.option(
    "--rule",
    "rules",
    multiple=True,
    required=True,
    help='One rule as JSON, e.g. \'{"weekdays": ["sat", "sun"]}\'; repeat it (rules are ORed), or give a JSON list.',
)
@click.option("--timezone", default="UTC", show_default=True, help="IANA time zone the rules are read in.")
@actor_option
@json_option
@with_target
def calendars_add(
    target: Target, name: str, rules: tuple[str, ...], timezone: str, actor: str | None, as_json: bool
) -> None:
    """Add or replace calendar NAME."""
    added = target.client().calendars.add(name, _rules(rules), timezone=timezone, actor=actor)
    if as_json:
        emit_json(added)
    else:
        click.echo(f"calendar {name}: {len(added['rules'])} rule(s) in {added['timezone']}")


@calendars.command("list")
@json_option
@with_target
def calendars_list(target: Target, as_json: bool) -> None:
    """Every calendar."""
    rows = target.client().calendars.list()
    if as_json:
        emit_json(rows)
        return
    emit_table(
        ["name", "timezone", "rules", "updated"],
        [(row["name"], row["timezone"], json.dumps(row["rules"]), row["updated_at"]) for row in rows],
        empty="no calendars",
    )


@calendars.command("show")
@click.argument("name")
@json_option
@with_target
def calendars_show(target: Target, name: str, as_json: bool) -> None:
    """Calendar NAME and its rules."""
    found = [row for row in target.client().calendars.list() if row["name"] == name]
    if not found:
        raise NotFound(f"no calendar named {name!r}")
    if as_json:
        emit_json(found[0])
        return
    click.echo(f"calendar {name} ({found[0]['timezone']}), in it when any rule matches:")
    for rule in found[0]["rules"] if isinstance(found[0]["rules"], list) else [found[0]["rules"]]:
        click.echo(f"  {json.dumps(rule)}")


@calendars.command("remove")
@click.argument("name")
@actor_option
@with_target
def calendars_remove(target: Target, name: str, actor: str | None) -> None:
    """Delete calendar NAME (refused while a schedule names it)."""
    if not target.client().calendars.remove(name, actor=actor):
        raise NotFound(f"no calendar named {name!r}")
    click.echo(f"removed calendar {name}")


def _rules(given: tuple[str, ...]) -> list[Any]:
    rules: list[Any] = []
    for text in given:
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise BadInput(
                f'--rule {text!r} is not valid JSON ({exc}); write e.g. \'{{"time": "22:00-06:00"}}\''
            ) from None
        rules.extend(value if isinstance(value, list) else [value])
    return rules
