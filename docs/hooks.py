"""MkDocs hooks of the documentation site (mkdocs.yml `hooks:`; not a page)."""

from __future__ import annotations

from typing import Any


def on_config(config: Any) -> Any:
    """Load every `jobsup` command before mkdocs-click reads the group: the operator's
    commands are imported when first asked for (`jobsup.cli.OPERATOR_COMMANDS`), and
    mkdocs-click lists only the commands a group already holds."""
    import click

    from jobsup.cli import cli

    context = click.Context(cli, info_name="jobsup")
    for name in cli.list_commands(context):
        cli.get_command(context, name)
    return config
