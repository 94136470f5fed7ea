"""`jobsup dashboard`: the web dashboard and HTTP API (`jobsup.web`, the ``web`` extra)."""

from __future__ import annotations

import getpass

import click

from jobsup.errors import ConfigurationError
from jobsup.ops.options import Target, with_target


@click.group(invoke_without_command=True)
@click.option("--host", help="Address to listen on (default 127.0.0.1; another needs credentials configured).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port to listen on (default 9466).")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]))
@with_target
@click.pass_context
def dashboard(ctx: click.Context, target: Target, host: str | None, port: int | None, log_level: str) -> None:
    """Serve the dashboard and the /api/v1 HTTP API until interrupted.

    Credentials: dashboard_tokens (ROLE:TOKEN) and dashboard_users (NAME:ROLE:HASH, see
    `jobsup dashboard hash-password`) in jobsup.toml or JOBSUP_DASHBOARD_* variables."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        from jobsup.web.server import serve
    except ImportError as exc:
        raise ConfigurationError(f"the dashboard needs the web extra: pip install 'jobsup[web]' ({exc})") from None
    settings = target.settings(dashboard_host=host, dashboard_port=port)
    serve(settings, log_level=log_level)


@dashboard.command("hash-password")
def hash_password() -> None:
    """Read a password (twice) and print its hash for dashboard_users."""
    from jobsup.web.auth import hash_password as hashed

    first = getpass.getpass("password: ")
    if len(first) < 8:
        raise click.UsageError("use a password of at least 8 characters")
    if getpass.getpass("again: ") != first:
        raise click.UsageError("the passwords differ")
    click.echo(hashed(first))
