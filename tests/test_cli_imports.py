"""`jobsup --version` and `jobsup --help` answer without loading SQLAlchemy, the store or a
database driver, and a command on a schema at head without loading Alembic (checked on
`sys.modules` in a fresh interpreter, not by timing); the lines `--help` shows for the
commands it has not imported are the commands' own."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from jobsup.cli import OPERATOR_COMMANDS, cli

HEAVY = ("sqlalchemy", "psycopg", "holidays", "alembic", "prometheus_client", "croniter", "cryptography")
HEAVY += ("jobsup.store",)


@pytest.mark.parametrize("asked", ["--version", "--help"])
def test_version_and_help_load_no_database_code(asked: str) -> None:
    code = (
        "import json, sys\nfrom jobsup.cli import main\n"
        f"try:\n    main([{asked!r}])\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert [m for m in loaded if m.startswith(HEAVY)] == []
    assert ("jobsup 0.1.0" if asked == "--version" else "Look at and cancel jobs.") in done.stdout


def test_the_listed_lines_are_the_commands_own() -> None:
    lazy = cli.get_help(click.Context(cli, info_name="jobsup"))
    for name, (module, attribute, line) in OPERATOR_COMMANDS.items():
        command = getattr(__import__(module, fromlist=[attribute]), attribute)
        assert command.name == name and command.get_short_help_str(limit=10**6) == line, name
        cli.add_command(command, name)
    assert cli.get_help(click.Context(cli, info_name="jobsup")) == lazy  # the same once every command is loaded


def test_every_top_level_operator_command_is_listed() -> None:
    import pkgutil
    from importlib import import_module

    import jobsup.ops

    found = {}
    for module in pkgutil.iter_modules(jobsup.ops.__path__):
        loaded = import_module(f"jobsup.ops.{module.name}")
        commands = {name: c for name, c in vars(loaded).items() if isinstance(c, click.Command)}
        inner = {id(sub) for c in commands.values() if isinstance(c, click.Group) for sub in _all_below(c)}
        found |= {c.name: (loaded.__name__, name) for name, c in commands.items() if id(c) not in inner}
    assert found == {name: (module, attribute) for name, (module, attribute, _) in OPERATOR_COMMANDS.items()}


def _all_below(group: click.Group) -> list[click.Command]:
    below: list[click.Command] = []
    for command in group.commands.values():
        below.append(command)
        if isinstance(command, click.Group):
            below += _all_below(command)
    return below


def test_a_process_that_only_registers_jobs_loads_no_database_code() -> None:
    code = (
        "import json, sys, jobsup\n"
        "@jobsup.job('x', queue='q', max_attempts=2)\n"
        "def x(ctx: jobsup.JobContext, payload: object) -> None: ...\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert [m for m in json.loads(done.stdout) if m.startswith(HEAVY)] == []


def test_a_command_and_an_upgrade_at_head_load_no_alembic(sqlite_url: str) -> None:
    """Alembic is needed only where the schema is behind: loading it was about a quarter of
    a `jobsup jobs list`'s CPU."""
    code = (
        "import json, sys\nfrom jobsup.cli import main\nfrom jobsup.store import migrate\n"
        "from jobsup.store.database import Database\n"
        f"migrate.upgrade(Database({sqlite_url!r}))\n"
        f"for command in (['db', 'upgrade'], ['jobs', 'list']):\n    try:\n"
        f"        main([*command, '--database-url', {sqlite_url!r}])\n    except SystemExit:\n        pass\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert [m for m in loaded if m.startswith("alembic")] == []
    assert done.stdout.startswith("jobsup schema is at revision") and "no jobs" in done.stdout, done.stdout
