"""`jobsup definitions list|show|sync`: the job types published in the database.

`sync --app MODULE` publishes the job types MODULE registers without starting workers: a
deploy step, so a web app deployed before its workers can enqueue by name."""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping

import click

from jobsup import retention
from jobsup.ops.options import NotFound, Target, json_option, with_target
from jobsup.ops.tables import age, emit_json, emit_table
from jobsup.paramcheck import expected
from jobsup.store.rows import Definition
from jobsup.templates import KEY as TEMPLATE


@click.group()
def definitions() -> None:
    """Job types published by the processes that run them."""


@definitions.command("list")
@json_option
@with_target
def definitions_list(target: Target, as_json: bool) -> None:
    """Every published job type, who declared it last, and any disagreement."""
    client = target.client()
    found = client.definitions()
    if as_json:
        emit_json([d.to_dict() for d in found])
        return
    states = {row["name"]: row["state"] for row in client.breakers.list()}
    emit_table(
        ["name", "queue", "attempts", "timeout", "priority", "breaker", "declared by", "declared", "disagreement"],
        [
            (
                *(d.name, d.queue, d.max_attempts, d.timeout, d.priority, breaker_column(d, states)),
                *(d.declared_by, age(d.declared_at), disagreement(d)),
            )
            for d in found
        ],
        empty="no job types are published: run `jobsup start --app MODULE` or `jobsup definitions sync --app MODULE`",
    )


def breaker_column(definition: Definition, states: Mapping[str, str]) -> str | None:
    """Its breaker's state; ``-`` for a type without a breaker policy (closed unless it failed)."""
    if not isinstance(definition.limits, dict) or "breaker" not in definition.limits:
        return states.get(definition.name, "-")
    return states.get(definition.name, "closed")


def disagreement(definition: Definition) -> str | None:
    other = definition.disagreement
    if not other:
        return None
    differ = [
        key
        for key in ("queue", "max_attempts", "timeout", "priority", "retry", "retain")
        if other.get(key) != getattr(definition, key)
    ]
    said = ", ".join(f"{key}={other.get(key)}" for key in differ) or "the same"
    return f"{other.get('by')} said {said} at {other.get('at')}"


@definitions.command("show")
@click.argument("name")
@json_option
@with_target
def definitions_show(target: Target, name: str, as_json: bool) -> None:
    """One job type as published: its settings and its parameters' schema."""
    found = [d for d in target.client().definitions() if d.name == name]
    if not found:
        raise NotFound(f"no job type named {name!r} is published")
    shown = found[0]
    if as_json:
        emit_json(shown.to_dict())
        return
    click.echo(
        f"{shown.name}: queue {shown.queue}, priority {shown.priority}, {shown.max_attempts} attempts, "
        f"timeout {shown.timeout or '-'}, declared by {shown.declared_by} {age(shown.declared_at)} ago"
    )
    if isinstance(shown.limits, dict) and shown.limits:
        click.echo("limits: " + "; ".join(f"{kind} {json.dumps(policy)}" for kind, policy in shown.limits.items()))
    kept = retention.load(shown.retain)
    if kept:
        ages = ", ".join(f"{state} {'forever' if age is None else span(age)}" for state, age in kept.items())
        click.echo(f"retain: {ages} (other end states: the retain_* settings)")
    if shown.params is None:
        click.echo("parameters: untyped (any JSON payload)")
        return
    required = set(shown.params.get("required", ()))
    emit_table(
        ["parameter", "type", "required", "default", "sensitive", "description"],
        [
            (
                field,
                expected(schema),
                "yes" if field in required else "no",
                default_column(schema),
                "yes" if schema.get("writeOnly") else None,
                schema.get("description"),
            )
            for field, schema in shown.params.get("properties", {}).items()
        ],
        empty="no parameters",
    )


def span(seconds: float) -> str:
    """``90m``, ``1d``, ``45s``: a duration as `jobsup.durations` reads it, in its largest whole unit."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:g}s"


def default_column(schema: Mapping[str, object]) -> str | None:
    """A literal default as JSON; a template default as the template, marked so."""
    if "default" in schema:
        return json.dumps(schema["default"])
    if TEMPLATE in schema:
        return f"template {schema[TEMPLATE]}"
    return None


@definitions.command("sync")
@click.option("--app", "apps", multiple=True, required=True, help="Module that registers jobs (repeatable).")
@with_target
def definitions_sync(target: Target, apps: tuple[str, ...]) -> None:
    """Publish the job types the --app modules register (no workers start)."""
    from jobsup.registry import import_apps, registered_types

    import_apps(apps)
    client = target.client()
    types = registered_types()
    for name, (jobs, reasons) in client.store.definitions.incompatible(types).items():
        said = "; ".join(f"{count} jobs: {reason}" for reason, count in reasons.most_common())
        click.echo(f"warning: {jobs} unfinished jobs of {name!r} do not fit its new parameters ({said})", err=True)
    changed = client.store.definitions.publish(types, instance=f"{socket.gethostname()}:sync")
    click.echo(f"published {len(types)} job types ({len(changed)} changed)")
