"""The small frictions a new user met on the command line (issue 30, item 7; the review's
F3, F4, F5, F10, F11, F17): each message says what is wrong and what to do, and the
tables show what an operator looks for."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

import jobsup

from helpers import claim_one, fail, mariadb_database_url, run_jobsup, succeed
from webhelpers import PASSWORD, web


@pytest.mark.postgres
def test_a_database_that_does_not_exist_is_a_configuration_error_not_an_outage(pg_server: str) -> None:
    result = run_jobsup("--database-url", "postgresql+psycopg://postgres@127.0.0.1/jobsup_nowhere", "jobs", "list")
    assert result.returncode == 2, result.stderr  # a usage error, as any wrong setting is
    assert 'database "jobsup_nowhere" does not exist' in result.stderr
    assert "refuses jobsup" in result.stderr and "createdb NAME" in result.stderr
    assert "cannot reach" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.postgres
def test_a_role_that_does_not_exist_is_a_configuration_error(pg_server: str) -> None:
    result = run_jobsup("--database-url", "postgresql+psycopg://jobsup_nobody@127.0.0.1/postgres", "stats")
    assert result.returncode == 2 and "refuses jobsup" in result.stderr and "jobsup_nobody" in result.stderr


@pytest.mark.mariadb
def test_mariadb_s_unknown_database_is_a_configuration_error_too(mariadb_server: str) -> None:
    result = run_jobsup("--database-url", mariadb_database_url("jobsup_nowhere"), "jobs", "list")
    assert result.returncode == 2 and "Unknown database 'jobsup_nowhere'" in result.stderr, result.stderr


def test_an_unreachable_server_names_the_driver_s_default_port() -> None:
    result = run_jobsup("--database-url", "postgresql+psycopg://postgres@jobsup-nowhere.invalid/x", "jobs", "list")
    assert result.returncode == 1 and "port 5432" in result.stderr and "port default" not in result.stderr


def test_a_relative_sqlite_url_is_shown_as_its_absolute_path(tmp_path: Path) -> None:
    result = run_jobsup("--database-url", "sqlite:///here.db", "jobs", "list", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert f"sqlite+pysqlite:///{tmp_path}/here.db has no jobsup schema" in result.stderr
    upgraded = run_jobsup("--database-url", "sqlite:///here.db", "db", "upgrade", cwd=tmp_path)
    assert f"on sqlite+pysqlite:///{tmp_path}/here.db" in upgraded.stdout, upgraded.stderr


def test_a_metrics_port_in_use_suggests_any_free_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_jobsup("start", "--metrics-port", str(port), "--queue", "default=1", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert f"cannot serve /metrics on 127.0.0.1:{port}" in result.stderr
    assert "--metrics-port 0 (any free port)" in result.stderr and "Traceback" not in result.stderr


def test_help_says_how_queues_are_shaped_and_which_priority_runs_first() -> None:
    start = run_jobsup("start", "--help").stdout
    assert "NAME=N[:C]" in start and "--claim-batch N|auto" in start and "--metrics-port INTEGER" in start
    assert "[debug|info|warning|error]" in start
    enqueue = run_jobsup("enqueue", "--help").stdout
    assert "Higher runs first" in " ".join(enqueue.split())
    assert "higher runs first" in " ".join(run_jobsup("recurring", "add", "--help").stdout.split())


def test_jobs_show_leaves_out_unset_fields_and_jobs_list_shows_a_retried_success_as_one(url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("flaky-cli", {}, allow_unknown=True)
    fail(client, claim_one(client), error="RuntimeError: first attempt fails")
    succeed(client, [claim_one(client)])
    shown = run_jobsup("--database-url", url, "jobs", "show", str(job_id))
    assert shown.returncode == 0, shown.stderr
    fields = shown.stdout.split("\n\n")[0].splitlines()
    assert not [line for line in fields if line.split()[-1] == "None"], fields
    assert "RuntimeError: first attempt fails" in shown.stdout  # the attempt history keeps it
    full = json.loads(run_jobsup("--database-url", url, "jobs", "show", str(job_id), "--json").stdout)
    assert full["actor"] is None and "unique_key" in full  # --json keeps every field
    listed = run_jobsup("--database-url", url, "jobs", "list").stdout
    row = next(line for line in listed.splitlines() if line.split()[0] == str(job_id))
    assert "succeeded" in row and "RuntimeError" not in row


def test_shell_completion_completes_commands() -> None:
    """As the docs say to set it up: ``eval "$(_JOBSUP_COMPLETE=bash_source jobsup)"``."""
    env = {"COMP_WORDS": "jobsup jo", "COMP_CWORD": "1", "_JOBSUP_COMPLETE": "bash_complete"}
    done = run_jobsup(env=env)
    assert done.returncode == 0 and "plain,jobs" in done.stdout.splitlines(), done.stdout + done.stderr
    source = run_jobsup(env={"_JOBSUP_COMPLETE": "bash_source"})
    assert "complete -o nosort -F _jobsup_completion jobsup" in source.stdout, source.stdout


def test_a_misspelt_time_zone_gets_a_did_you_mean(url: str) -> None:
    adding = ("recurring", "add", "nightly", "--job", "x", "--allow-unknown", "--cron", "@daily")
    result = run_jobsup("--database-url", url, *adding, "--timezone", "Europe/Berln")
    assert result.returncode == 2
    assert "time zone 'Europe/Berln' is not known (did you mean 'Europe/Berlin'?)" in result.stderr


def test_a_taken_dashboard_port_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_jobsup("dashboard", "--port", str(port), cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"cannot serve the dashboard on 127.0.0.1:{port}" in result.stderr and "--port" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_script_posting_with_a_password_is_told_to_use_a_bearer_token(url: str) -> None:
    with web(url) as http:
        refused = http.post("/api/v1/queues/mail/pause", auth=("alice", PASSWORD))
    assert refused.status_code == 403
    assert "'Authorization: Bearer TOKEN'" in refused.json()["error"]["message"]


def test_log_lines_round_seconds_to_the_millisecond() -> None:
    from jobsup.observe.logs import _value

    assert (_value(2.474195), _value(0.022662), _value(3), _value("two words")) == (
        "2.474",
        "0.023",
        "3",
        "'two words'",
    )
