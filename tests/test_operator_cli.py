"""The operator's command line against a real database: output, --json shapes, exit codes."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

import jobsup
from jobsup.registry import lookup, registered_types

from helpers import claim, fail, run_jobsup, succeed


@pytest.fixture(autouse=True)
def published(request: pytest.FixtureRequest) -> None:
    """The job types of `jobapps` published, as a deploy step would. In this process, as
    `jobsup definitions sync --app jobapps` publishes them: a command per test would cost
    each test another start of the command line (`test_definitions.py` runs the command
    itself). Only jobapps' types: this process has registered other test modules' too."""
    names = [name for name in ("url", "sqlite_url") if name in request.fixturenames]
    if not names:
        return
    types = [t for t in registered_types() if (r := lookup(t.name)) is not None and r.function.__module__ == "jobapps"]
    client = jobsup.Client(request.getfixturevalue(names[0]))
    try:
        client.store.definitions.publish(types, instance="tests:sync")
    finally:
        client.close()


def jobsup_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_jobsup(*args, "--database-url", url)


def ok(url: str, *args: str) -> str:
    result = jobsup_cli(url, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def as_json(url: str, *args: str) -> Any:
    return json.loads(ok(url, *args, "--json"))


def test_enqueue_show_list_cancel(url: str) -> None:
    job_id = int(ok(url, "enqueue", "send-email", "--payload", '{"to": "a@example.com"}', "--queue", "mail"))
    assert as_json(url, "enqueue", "send-email", "--delay", "1h") == {"id": job_id + 1}
    shown = as_json(url, "jobs", "show", str(job_id))
    assert {k: shown[k] for k in ("id", "name", "queue", "status", "attempts", "max_attempts")} == {
        "id": job_id,
        "name": "send-email",
        "queue": "mail",
        "status": "pending",
        "attempts": 0,
        "max_attempts": 5,
    }
    assert shown["history"] == [] and shown["payload"] == {"to": "a@example.com"}
    listed = as_json(url, "jobs", "list", "--queue", "mail")
    assert [job["id"] for job in listed] == [job_id]
    table = ok(url, "jobs", "list")
    assert table.splitlines()[0].split() == ["ID", "NAME", "QUEUE", "STATUS", "ATTEMPTS", "RUN", "AT", "LAST", "ERROR"]
    assert "cancelled job" in ok(url, "jobs", "cancel", str(job_id))
    again = jobsup_cli(url, "jobs", "cancel", str(job_id))
    assert (
        again.returncode == 1
        and again.stderr.strip() == f"jobsup: job {job_id} is not pending or running (or does not exist)"
    )


def test_missing_job_exits_1_with_one_line(url: str) -> None:
    result = jobsup_cli(url, "jobs", "show", "424242")
    assert result.returncode == 1
    assert result.stderr == "jobsup: no job with id 424242\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["enqueue", "x", "--payload", "{nope"], "--payload is not valid JSON"),
        (["enqueue", "x", "--run-at", "2030-01-01T09:00:00"], "has no time zone"),
        (["enqueue", "x", "--delay", "5m", "--run-at", "2030-01-01T09:00:00Z"], "give --delay or --run-at, not both"),
        (["enqueue", "x", "--delay", "soon"], "delay: 'soon' is not a duration"),
        (["jobs", "list", "--status", "done"], "Invalid value for '--status'"),
        (["jobs", "show", "abc"], "'abc' is not a valid integer"),
        (["recurring", "add", "r", "--job", "x", "--cron", "61 * * * *"], "is not a valid cron expression"),
        (["recurring", "add", "r", "--job", "x", "--cron", "* * * * *", "--timezone", "Nowhere/City"], "not known"),
        (["dead", "retry"], "give job ids or --all"),
        (["jobs", "show", "99999999999999999999"], "a job id is a whole number of at most 64 bits"),
        (["enqueue", "x", "--priority", "99999999999999"], "priority must be an int between"),
        (["recurring", "add", "r", "--job", "x", "--cron", "0 0 30 2 *"], "never matches a real date"),
    ],
)
def test_user_mistakes_exit_2_with_a_reason_and_no_traceback(sqlite_url: str, args: list[str], message: str) -> None:
    result = jobsup_cli(sqlite_url, *args)
    assert result.returncode == 2, result
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert jobsup.Client(sqlite_url).list_jobs() == []


def test_dead_letters_list_retry_and_purge(url: str) -> None:
    client = jobsup.Client(url)
    ids = [client.enqueue("x", n, max_attempts=1) for n in range(3)]
    for claimed in claim(client, "w", limit=3):
        fail(client, claimed, error="Boom: no")
    dead = as_json(url, "dead", "list")
    assert sorted(job["id"] for job in dead) == ids and dead[0]["last_error"] == "Boom: no"
    assert ok(url, "dead", "retry", str(ids[0])).strip() == "retried 1 jobs"
    assert ok(url, "dead", "retry", "--all").strip() == "retried 2 jobs"
    assert as_json(url, "dead", "list") == []
    for claimed in claim(client, "w", limit=3):
        fail(client, claimed, error="Boom")
    assert ok(url, "dead", "purge", "--older-than", "1d").strip() == "purged 0 jobs"
    assert ok(url, "dead", "purge").strip() == "purged 3 jobs"


def test_recurring_add_is_an_upsert_and_list_enable_disable_remove(url: str) -> None:
    added = as_json(
        url, "recurring", "add", "nightly", "--job", "report", "--cron", "0 3 * * *", "--timezone", "Europe/Berlin"
    )
    assert added["name"] == "nightly" and added["enabled"] is True
    again = as_json(
        url, "recurring", "add", "nightly", "--job", "report", "--cron", "0 3 * * *", "--payload", '{"a": 1}'
    )
    assert again["timezone"] == "UTC" and again["payload"] == {"a": 1}
    assert [s["name"] for s in as_json(url, "recurring", "list")] == ["nightly"]
    assert "disabled schedule nightly" in ok(url, "recurring", "disable", "nightly")
    assert as_json(url, "recurring", "list")[0]["enabled"] is False
    assert "enabled schedule nightly" in ok(url, "recurring", "enable", "nightly")
    assert "removed schedule nightly" in ok(url, "recurring", "remove", "nightly")
    missing = jobsup_cli(url, "recurring", "remove", "nightly")
    assert missing.returncode == 1 and "no schedule named 'nightly'" in missing.stderr


def test_stats_and_workers(url: str) -> None:
    client = jobsup.Client(url)
    client.enqueue_many([{"name": "x"}, {"name": "x"}, {"name": "x", "queue": "mail"}])
    succeed(client, claim(client, "host:default#1:abc"))
    stats = {row["queue"]: row for row in as_json(url, "stats")}
    assert (stats["default"]["pending"], stats["default"]["succeeded"], stats["mail"]["pending"]) == (1, 1, 1)
    assert stats["default"]["per_minute"] == pytest.approx(1 / 5)
    table = client.store.processes
    table.process_register(id="host:supervisor:1", kind="supervisor", host="host", pid=10)
    table.process_register(
        id="host:default#1:abc", kind="worker", host="host", pid=11, supervisor_id="host:supervisor:1", queue="default"
    )
    claim(client, "host:default#1:abc")
    rows = {row["id"]: row for row in as_json(url, "workers")}
    assert rows["host:default#1:abc"]["state"] == "running" and rows["host:default#1:abc"]["job"] is not None
    assert rows["host:supervisor:1"]["state"] == "supervising"
    assert "heartbeat" in ok(url, "workers").splitlines()[0].lower()


def test_database_url_and_config_go_before_or_after_the_subcommand(sqlite_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Item 24, as most command lines do."""
    before = run_jobsup("--database-url", sqlite_url, "enqueue", "a")
    after = run_jobsup("enqueue", "a", "--database-url", sqlite_url)
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    config = tmp_path / "settings.toml"
    config.write_text(f'database_url = "{sqlite_url}"\n')
    listed = run_jobsup("--config", str(config), "jobs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 2
    assert len(json.loads(run_jobsup("jobs", "list", "--json", "--config", str(config)).stdout)) == 2
    missing = run_jobsup("--config", str(tmp_path / "nope.toml"), "jobs", "list")
    assert missing.returncode == 2 and "config file" in missing.stderr and "does not exist" in missing.stderr


def test_version_prints_the_version() -> None:
    result = run_jobsup("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"jobsup {jobsup_version()}"


def jobsup_version() -> str:
    from importlib.metadata import version

    return version("jobsup")


UNREACHABLE = "postgresql://app:s3cret@127.0.0.1:1/app"
COMMANDS = [
    ["enqueue", "a"],
    ["jobs", "list"],
    ["jobs", "show", "1"],
    ["jobs", "cancel", "1"],
    ["dead", "list"],
    ["dead", "retry", "--all"],
    ["dead", "purge"],
    ["recurring", "add", "r", "--job", "a", "--cron", "* * * * *"],
    ["recurring", "list"],
    ["recurring", "remove", "r"],
    ["recurring", "enable", "r"],
    ["recurring", "disable", "r"],
    ["definitions", "list"],
    ["definitions", "show", "a"],
    ["definitions", "sync", "--app", "jobapps"],
    ["workers"],
    ["stats"],
    ["db", "upgrade"],
]


def one_line_without_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode in (1, 2), result
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr and "s3cret" not in result.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_command_says_in_one_line_that_the_database_is_unreachable(command: list[str]) -> None:
    """Item 25: a wrong URL."""
    result = run_jobsup(*command, "--database-url", UNREACHABLE)
    one_line_without_traceback(result)
    assert result.returncode == 1 and "cannot reach the database" in result.stderr


@pytest.mark.parametrize("command", [c for c in COMMANDS if c[:2] != ["db", "upgrade"]], ids=lambda c: " ".join(c[:2]))
def test_every_command_says_in_one_line_that_the_schema_is_missing(command: list[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Item 25: a database without the jobsup schema."""
    result = run_jobsup(*command, "--database-url", f"sqlite:///{tmp_path / 'empty.db'}")
    one_line_without_traceback(result)
    assert "run `jobsup db upgrade`" in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["jobs", "show", "1"], 1, "no job with id 1"),
        (["jobs", "cancel", "1"], 1, "job 1 is not pending or running"),
        (["dead", "retry", "1"], 1, "not dead-lettered: 1"),
        (["recurring", "remove", "r"], 1, "no schedule named 'r'"),
        (["enqueue", "a", "--timeout", "forever"], 2, "timeout: 'forever' is not a duration"),
        (["dead", "purge", "--older-than", "ages"], 2, "older_than: 'ages' is not a duration"),
        (["stats", "--window", "0"], 2, "window must be longer than zero"),
        (["recurring", "add", "r", "--job", "a", "--cron", "* * *"], 2, "is not a valid cron expression"),
        (["recurring", "add", "r", "--job", "a", "--cron", "* * * * * *"], 2, "a seconds field is not supported"),
        (
            ["recurring", "add", "r", "--job", "a", "--cron", "@daily", "--payload", "{x"],
            2,
            "--payload is not valid JSON",
        ),
        (["enqueue", "a", "--payload", "[1,"], 2, "--payload is not valid JSON"),
        (["jobs", "list", "--limit", "0"], 2, "Invalid value for '--limit'"),
        (["definitions", "sync", "--app", "no_such_module"], 2, "cannot import app 'no_such_module'"),
    ],
)
def test_bad_input_to_any_command_is_one_line(sqlite_url: str, args: list[str], code: int, message: str) -> None:
    """Item 25: a wrong job id, a bad duration, a bad cron, bad JSON; exit 1 for what is not
    there, 2 for input that is wrong (docs/reference/cli.md, exit status)."""
    result = run_jobsup(*args, "--database-url", sqlite_url)
    one_line_without_traceback(result)
    assert message in result.stderr
    assert result.returncode == code, result.stderr
