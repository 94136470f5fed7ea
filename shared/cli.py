"""The `jobsup` command line.

Exit status: 0 success; 2 bad usage or bad input (one readable line, no traceback);
1 a runtime failure such as an unreachable database (the password hidden).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

import click
from setproctitle import setproctitle

from jobsup import __version__
from jobsup.errors import BadInput, ConfigurationError, DatabaseMisconfigured, JobsupError
from jobsup.observe import subscribe_logs_and_metrics
from jobsup.ops.options import Target, config_option, database_url_option, with_target

EXIT_FAILURE, EXIT_USAGE = 1, 2

# The operator's commands (`jobsup.ops`), beside `start` and `db` below: by name, the module
# and attribute of each, and the line `jobsup --help` shows for it (its help's first
# sentence; `test_cli_imports.py` holds them equal). A module is imported when its command
# runs or shows its own help, so `jobsup --help` and `--version` load neither SQLAlchemy nor
# the store.
OPERATOR_COMMANDS = {
    "audit": (
        "jobsup.ops.audit",
        "audit",
        "Operator actions, newest first: who did what, to which queue, schedule or jobs.",
    ),
    "batches": ("jobsup.ops.batches", "batches", "Batches: many jobs with callbacks once they have all ended."),
    "bench": (
        "jobsup.ops.bench",
        "bench",
        "Measure enqueue and processing throughput, idle latency and memory on this database.",
    ),
    "breaker": (
        "jobsup.ops.breakers",
        "breaker",
        "Circuit breakers: job types whose jobs are held back after consecutive failures.",
    ),
    "calendars": (
        "jobsup.ops.calendars",
        "calendars",
        "Named calendars: blackout windows and allowed hours for schedules and job types.",
    ),
    "dashboard": (
        "jobsup.ops.dashboard",
        "dashboard",
        "Serve the dashboard and the /api/v1 HTTP API until interrupted.",
    ),
    "dead": ("jobsup.ops.jobs", "dead", "Dead letters: jobs that used up their attempts or were discarded."),
    "definitions": ("jobsup.ops.definitions", "definitions", "Job types published by the processes that run them."),
    "enqueue": (
        "jobsup.ops.jobs",
        "enqueue",
        "Enqueue job NAME and print its id (the job's actor, and the audit trail's, is --actor).",
    ),
    "events": (
        "jobsup.ops.events",
        "events",
        "Events on their way to the publisher: those parked because it refused them for good.",
    ),
    "jobs": ("jobsup.ops.jobs", "jobs", "Look at and cancel jobs."),
    "keys": ("jobsup.ops.keys", "keys", "Encryption keys for sensitive parameters (JOBSUP_ENCRYPTION_KEYS)."),
    "queues": ("jobsup.ops.pauses", "queues", "Queues: their depth, and pausing them on every instance."),
    "recurring": ("jobsup.ops.recurring", "recurring", "Recurring schedules."),
    "stats": (
        "jobsup.ops.queues",
        "stats",
        "Per queue: waiting, pending (retrying, scheduled), running, finished jobs; throughput.",
    ),
    "workers": ("jobsup.ops.queues", "workers", "Supervisors and workers of every instance, with their current job."),
    "workflows": ("jobsup.ops.workflows", "workflows", "Workflows: jobs that run after the jobs they depend on."),
}


class Commands(click.Group):
    """jobsup's commands, the operator's imported when first needed (`OPERATOR_COMMANDS`)."""

    listing = False  # `jobsup --help` is listing the commands: their lines only

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *OPERATOR_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands or name not in OPERATOR_COMMANDS:
            return self.commands.get(name)
        module, attribute, line = OPERATOR_COMMANDS[name]
        if self.listing:
            return click.Command(name, help=line)
        command: click.Command = getattr(import_module(module), attribute)
        self.add_command(command, name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self.listing = False


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="jobsup", message="%(prog)s %(version)s")
@database_url_option
@config_option
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, config: Path | None) -> None:
    """jobsup: durable background jobs in the database you already have.

    --database-url and --config go before or after the subcommand."""
    ctx.obj = {"database_url": database_url, "config": config}


@cli.group()
def db() -> None:
    """The jobsup schema."""


@db.command("upgrade")
@click.option("--sql", is_flag=True, help="Print the DDL instead of applying it (no database needed).")
@click.option(
    "--dialect",
    type=click.Choice(["sqlite", "postgresql", "mssql", "mariadb", "mysql"]),
    help="With --sql: the database to write DDL for (default: the URL's).",
)
@with_target
def db_upgrade(target: Target, sql: bool, dialect: str | None) -> None:
    """Create or upgrade the jobsup tables (safe while other instances do the same)."""
    from jobsup.store import migrate
    from jobsup.store.database import Database
    from jobsup.store.dialects import backend_name
    from jobsup.store.schema import SCHEMA_REVISION

    url = target.settings().database_url
    if sql:
        migrate.upgrade_sql(dialect or backend_name(url), sys.stdout)
        return
    if dialect is not None:
        raise click.UsageError("--dialect goes with --sql")
    database = Database(url)
    migrate.upgrade(database)
    click.echo(f"jobsup schema is at revision {SCHEMA_REVISION} on {database.safe_url}")


def claim_batch(ctx: click.Context, param: click.Parameter, value: str | None) -> int | str | None:
    """--claim-batch: a whole number from 1, or auto (the adaptive default, said again)."""
    if value is None or value.strip().lower() == "auto":
        return None if value is None else "auto"
    try:
        number = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a whole number or auto") from None
    if number < 1:
        raise click.BadParameter(f"{number} is less than 1: claim at least one job at once (or auto)")
    return number


@cli.command()
@click.option("--app", "apps", multiple=True, help="Module that registers jobs (repeatable).")
@click.option(
    "--queue",
    "queues",
    multiple=True,
    help="NAME=N[:C]: N worker processes, each running C jobs at once (default 1), "
    "e.g. default=2 or mail=1:20 (repeatable).",
)
@click.option("--lease", help="How long a claim holds a job without renewal (default 5m).")
@click.option("--heartbeat", help="How often a running job's lease is renewed (default 1m).")
@click.option("--poll-interval", help="Idle wait between claims (default 1s; PostgreSQL 5s, woken by NOTIFY).")
@click.option("--listen-url", help="PostgreSQL: where idle workers LISTEN (a direct server URL behind PgBouncer; off).")
@click.option("--maintenance-interval", help="How often leases are swept and rows pruned (default 15s).")
@click.option("--shutdown-grace", help="How long a running job may finish on shutdown (default 20s).")
@click.option(
    "--claim-batch",
    metavar="N|auto",
    callback=claim_batch,
    help="Jobs a worker claims at once, run one by one (default auto: 1 to 32).",
)
@click.option("--migrate/--no-migrate", default=None, help="Upgrade the schema on start (default on).")
@click.option("--metrics-host", help="Address for /metrics and /healthz (default 127.0.0.1).")
@click.option(
    "--metrics-port",
    type=click.IntRange(-1, 65535),
    help="Port for /metrics and /healthz (default 9465; 0 any free port; -1 off).",
)
@click.option("--faults", help="Fault injection for drills and tests, e.g. worker:renew@2s+30s.")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    help="debug, info (default), warning or error.",
)
@click.option("--log-format", type=click.Choice(["text", "json"]), help="text (default) or json, one object per line.")
@click.option("--log-root/--no-log-root", default=None, help="Show what jobs log through logging (default on).")
@with_target
def start(target: Target, apps: tuple[str, ...], queues: tuple[str, ...], **options: Any) -> None:
    """Run the supervisor and its worker processes until SIGTERM or SIGINT."""
    import os

    from jobsup import exits
    from jobsup.observe.logs import configure_logging
    from jobsup.supervisor.arbiter import Arbiter, WorkerBootFailed

    overrides = {key: value for key, value in options.items() if value is not None}
    if apps:
        overrides["apps"] = apps
    if queues:
        overrides["queues"] = list(queues)
    settings = target.settings(**overrides)
    if settings.faults:
        os.environ["JOBSUP_FAULTS"] = settings.faults
    configure_logging(settings.log_level, settings.log_format)
    try:
        sys.exit(Arbiter(settings).run())
    except WorkerBootFailed as exc:
        click.echo(f"jobsup: {exc}", err=True)
        sys.exit(exits.BOOT_FAILED)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: jobsup errors become one line and an exit status, not a traceback."""
    hide_passwords_from_ps()
    subscribe_logs_and_metrics()
    run(cli, argv)


# A URL's password: `scheme://user:PASSWORD@host`.
_URL_PASSWORD = re.compile(r"(\w[\w+.-]*://[^\s:/@]*:)([^\s@/]*)(@)")


def without_passwords(words: list[str]) -> list[str]:
    """`words` with every URL's password shown as ***."""
    return [_URL_PASSWORD.sub(r"\1***\3", word) for word in words]


def hide_passwords_from_ps() -> None:
    """A `--database-url` given with its password on the command line is readable by every
    local user in `ps` and /proc/PID/cmdline for as long as the command runs (a dashboard, a
    supervisor: days). Rewrite this process's title without it, first thing. (Before this
    runs it is visible for a moment: a password is better given by JOBSUP_DATABASE_URL or the
    settings file.)"""
    shown = without_passwords(sys.argv)
    if shown != sys.argv:
        setproctitle(" ".join(shown))


def run(command: Callable[..., Any], argv: list[str] | None) -> None:
    try:
        command.main(args=argv, prog_name="jobsup", standalone_mode=False)  # type: ignore[attr-defined]
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_FAILURE)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        where = f"; see `{exc.ctx.command_path} --help`" if exc.ctx is not None else ""
        click.echo(f"jobsup: {exc.format_message()}{where}", err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE)
    except (BadInput, ConfigurationError, DatabaseMisconfigured) as exc:
        click.echo(f"jobsup: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except JobsupError as exc:
        click.echo(f"jobsup: {exc}", err=True)
        sys.exit(EXIT_FAILURE)


if __name__ == "__main__":
    main()
