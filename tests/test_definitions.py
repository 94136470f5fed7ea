"""Job definitions in the database: a process that does not import the workers' code enqueues
with the workers' settings; a name nobody defined is refused clearly; `jobsup start` and
`jobsup definitions sync` publish them; a disagreement between deployments is shown.
(The hardening issue's item 9.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

import jobsup
from jobsup.jobtypes import JobType
from jobsup.store.schema import job

from harness import Supervisor
from helpers import run_jobsup, wait_until

MAILER = JobType("mailer-elsewhere", queue="mail", max_attempts=8, timeout=60.0, priority=2)


def count_jobs(client: jobsup.Client) -> int:
    with client.database.read() as conn:
        return int(conn.execute(select(func.count()).select_from(job)).scalar_one())


def test_enqueue_by_name_takes_the_published_settings(url: str) -> None:
    """This process never registered `mailer-elsewhere`: the workers published it."""
    workers = jobsup.Client(url)
    workers.store.definitions.publish([MAILER], instance="workers-host:supervisor:1")
    web = jobsup.Client(url)
    stored = web.get(web.enqueue("mailer-elsewhere", {"to": "a@example.com"}))
    assert stored is not None
    assert (stored.queue, stored.max_attempts, stored.timeout, stored.priority) == ("mail", 8, 60.0, 2)
    overridden = web.get(web.enqueue("mailer-elsewhere", queue="bulk", max_attempts=2))
    assert overridden is not None and (overridden.queue, overridden.max_attempts) == ("bulk", 2)


def test_a_definition_published_after_a_miss_is_found(url: str) -> None:
    web = jobsup.Client(url)
    with pytest.raises(jobsup.UnknownJob):
        web.enqueue("mailer-elsewhere")
    jobsup.Client(url).store.definitions.publish([MAILER], instance="late-deploy")
    web.store.resolver.loaded_at -= 2  # the one-second pause between reloads on a miss has passed
    assert web.get(web.enqueue("mailer-elsewhere")).queue == "mail"  # type: ignore[union-attr]


def test_an_unknown_name_is_refused_with_the_close_ones_and_nothing_written(url: str) -> None:
    client = jobsup.Client(url)
    with pytest.raises(jobsup.UnknownJob) as caught:
        client.enqueue("send-emial")
    message = str(caught.value)
    assert "no job type named 'send-emial'" in message and "did you mean 'send-email'" in message
    assert "jobsup definitions sync --app MODULE" in message and "allow_unknown=True" in message
    with pytest.raises(jobsup.UnknownJob):
        client.enqueue_many([{"name": "a"}, {"name": "nobody-defined-this"}])
    with pytest.raises(jobsup.UnknownJob):
        client.add_recurring("nightly", job="nobody-defined-this", cron="0 3 * * *")
    assert count_jobs(client) == 0 and client.schedules.list() == []
    stored = client.get(client.enqueue("nobody-defined-this", allow_unknown=True))
    assert stored is not None and (stored.queue, stored.max_attempts) == ("default", 5)


def test_the_cli_refuses_an_unknown_name_in_one_line(sqlite_url: str) -> None:
    assert run_jobsup("definitions", "sync", "--app", "jobapps", "--database-url", sqlite_url).returncode == 0
    result = run_jobsup("enqueue", "send-emial", "--database-url", sqlite_url)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "did you mean 'send-email'" in result.stderr and "--allow-unknown" in result.stderr
    assert "Traceback" not in result.stderr
    allowed = run_jobsup("enqueue", "send-emial", "--allow-unknown", "--database-url", sqlite_url)
    assert allowed.returncode == 0, allowed.stderr


@pytest.mark.slow
def test_jobsup_start_publishes_its_apps_job_types(url: str, record: Path, tmp_path: Path) -> None:
    supervisor = Supervisor(url, record, tmp_path / "supervisor.log")
    try:
        client = jobsup.Client(url)
        work = wait_until(
            lambda: {d.name: d for d in client.definitions()}.get("work"), timeout=30, what="`work` to be published"
        )
        assert (work.queue, work.max_attempts, work.retry["custom"]) == ("default", 5, "jobapps.<lambda>")
        assert ":supervisor:" in work.declared_by and work.disagreement is None
    finally:
        supervisor.stop()


def test_sync_publishes_and_list_shows_a_disagreement(url: str) -> None:
    synced = run_jobsup("definitions", "sync", "--app", "jobapps", "--database-url", url)
    assert synced.returncode == 0 and "published" in synced.stdout, synced.stderr
    client = jobsup.Client(url)
    other = JobType("report", queue="reports", max_attempts=3)
    client.store.definitions.publish([other], instance="other-deploy:supervisor:9")
    listed = run_jobsup("definitions", "list", "--json", "--database-url", url)
    report = {d["name"]: d for d in json.loads(listed.stdout)}["report"]
    assert (report["queue"], report["max_attempts"], report["declared_by"]) == (
        "reports",
        3,
        "other-deploy:supervisor:9",
    )
    assert report["disagreement"]["queue"] == "default" and report["disagreement"]["by"].endswith(":sync")
    table = run_jobsup("definitions", "list", "--database-url", url).stdout
    assert "said queue=default, max_attempts=5" in table
    shown = json.loads(run_jobsup("definitions", "show", "report", "--json", "--database-url", url).stdout)
    assert shown["queue"] == "reports"
    missing = run_jobsup("definitions", "show", "nope", "--database-url", url)
    assert missing.returncode == 1 and "no job type named 'nope' is published" in missing.stderr


def test_a_disagreement_is_kept_while_both_keep_declaring_and_the_newest_wins(url: str) -> None:
    definitions = jobsup.Client(url).store.definitions
    definitions.publish([MAILER], instance="a")
    definitions.publish([JobType(MAILER.name, queue="other")], instance="b")
    definitions.publish([MAILER], instance="a")
    found = definitions.get(MAILER.name)
    assert found is not None and found.queue == "mail" and found.declared_by == "a"
    assert found.disagreement is not None and (found.disagreement["by"], found.disagreement["queue"]) == ("b", "other")
    definitions.publish([MAILER], instance="c")  # agrees: the old disagreement stays until it is a day old
    assert definitions.get(MAILER.name).disagreement is not None  # type: ignore[union-attr]
