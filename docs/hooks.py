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


def on_post_build(config: Any) -> None:
    """Write the HTTP API's OpenAPI document into the built site, beside its reference page
    (`reference/openapi.json`), from the same declarations the application serves."""
    import json
    from pathlib import Path

    from jobsup import __version__
    from jobsup.web.app import OPERATIONS
    from jobsup.web.openapi import document

    target = Path(config["site_dir"]) / "reference" / "openapi.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document(OPERATIONS, __version__), indent=2) + "\n")
