"""`jobsup calendars` and the schedule options on the command line: output, --json, and bad
input as one line and exit status 2, never a traceback."""

from __future__ import annotations

import json
import subprocess

from helpers import run_jobsup


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_jobsup(*args, "--database-url", url)


def test_add_list_show_remove_and_a_schedule_that_names_it(url: str) -> None:
    added = cli(
        url, "calendars", "add", "night", "--timezone", "Europe/Berlin", "--rule", '{"time": "22:00-06:00"}',
        "--rule", '[{"holidays": "DE", "subdivision": "BY"}]',
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == "calendar night: 2 rule(s) in Europe/Berlin"
    [row] = json.loads(cli(url, "calendars", "list", "--json").stdout)
    assert row["rules"] == [{"time": "22:00-06:00"}, {"holidays": "DE", "subdivision": "BY"}]
    shown = cli(url, "calendars", "show", "night").stdout
    assert '{"time": "22:00-06:00"}' in shown and "Europe/Berlin" in shown
    schedule = cli(
        url, "recurring", "add", "nightly", "--job", "work", "--cron", "0 * * * *", "--overlap", "skip",
        "--calendar", "night", "--calendar-policy", "defer_to_end", "--allow-unknown", "--json",
    )  # fmt: skip
    assert schedule.returncode == 0, schedule.stderr
    shown_schedule = json.loads(schedule.stdout)
    assert (shown_schedule["overlap"], shown_schedule["calendar"], shown_schedule["calendar_policy"]) == (
        "skip",
        "night",
        "defer_to_end",
    )
    listed = cli(url, "recurring", "list").stdout
    assert "SKIPPED" in listed and "night (blackout, defer_to_end)" in listed
    refused = cli(url, "calendars", "remove", "night")
    assert refused.returncode == 2 and "used by schedule(s) nightly" in refused.stderr
    assert cli(url, "recurring", "remove", "nightly").returncode == 0
    assert cli(url, "calendars", "remove", "night").returncode == 0
    assert cli(url, "calendars", "show", "night").returncode == 1


def test_bad_input_is_one_line_and_exit_status_two(url: str) -> None:
    for args, message in [
        (("calendars", "add", "c", "--rule", '{"time": "25:00-26:00"}'), "HH:MM-HH:MM"),
        (("calendars", "add", "c", "--rule", "{nope"), "is not valid JSON"),
        (("calendars", "add", "c", "--rule", '{"holidays": "XX"}'), "no public holidays known for 'XX'"),
        (("calendars", "add", "c", "--rule", '{"dates": "2026-12-26..2026-12-24"}'), "ends before it starts"),
        (("calendars", "add", "c", "--rule", "[]"), "non-empty list"),
        (
            ("recurring", "add", "r", "--job", "w", "--cron", "@hourly", "--calendar", "nope", "--allow-unknown"),
            "is not known",
        ),
    ]:
        result = cli(url, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert json.loads(cli(url, "calendars", "list", "--json").stdout) == []
