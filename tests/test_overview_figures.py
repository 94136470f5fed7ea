"""The overview's figures on SQLite and PostgreSQL: per queue, the live counts, and the last
hour's finished jobs in twelve five-minute buckets, counted and timed by the database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import jobsup
import jobsup.client

from helpers import claim, fail, succeed

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def finish(client: jobsup.Client, queue: str, *, due: float, ended: float, ok: bool = True, name: str = "work") -> None:
    client.enqueue(name, queue=queue, run_at=ago(due), max_attempts=1, allow_unknown=True)
    [job] = claim(client, queue=queue, now=ago(due))
    if ok:
        succeed(client, [job], now=ago(ended))
    else:
        fail(client, job, now=ago(ended))


def test_the_last_hour_is_counted_per_bucket_with_its_mean_wait(client: jobsup.Client) -> None:
    finish(client, "mail", due=51, ended=49)  # bucket 2 (49 minutes ago), waited 120 s
    finish(client, "mail", due=50, ended=49.5)  # bucket 2 too, waited 30 s
    finish(client, "mail", due=2, ended=1)  # the newest bucket, waited 60 s
    finish(client, "mail", due=11, ended=10, ok=False)  # dead-lettered: bucket 10
    finish(client, "mail", due=130, ended=120)  # two hours ago: outside the window
    finish(client, "reports", due=30, ended=29)
    client.enqueue("work", queue="mail", run_at=ago(5))  # pending, due five minutes ago
    [row] = [q for q in client.queues.overview(now=NOW) if q["queue"] == "mail"]
    assert row["succeeded"] == [0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert row["failed"] == [0] * 10 + [1, 0]
    assert row["latency"][2] == 75.0 and row["latency"][11] == 60.0
    assert [n for n in row["latency"] if n is not None] == [75.0, 60.0]
    assert (row["pending"], row["running"], row["dead_lettered"]) == (1, 0, 1)
    assert row["oldest_pending_seconds"] == 300.0
    [other] = [q for q in client.queues.overview(now=NOW) if q["queue"] == "reports"]
    assert sum(other["succeeded"]) == 1 and other["latency"][6] == 60.0


def test_the_last_hour_is_also_counted_per_job_type(client: jobsup.Client) -> None:
    """Issue 30 item 3: the charts per job type as well as per queue."""
    finish(client, "mail", due=51, ended=49, name="welcome")
    finish(client, "mail", due=2, ended=1, name="digest")
    finish(client, "mail", due=11, ended=10, ok=False, name="digest")
    finish(client, "reports", due=30, ended=29, name="digest")
    by_type = client.last_hour(by="job", now=NOW)
    assert sorted(by_type) == ["digest", "welcome"]
    assert by_type["welcome"]["succeeded"] == [0, 0, 1] + [0] * 9 and by_type["welcome"]["latency"][2] == 120.0
    assert by_type["digest"]["succeeded"] == [0] * 6 + [1] + [0] * 4 + [1]
    assert by_type["digest"]["failed"] == [0] * 10 + [1, 0]
    assert sorted(client.last_hour(now=NOW)) == ["mail", "reports"]
    with pytest.raises(jobsup.BadInput, match="by must be"):
        client.last_hour(by="host")  # type: ignore[arg-type]


def test_a_filtered_job_list_looks_through_a_bounded_stretch_per_page(
    client: jobsup.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobsup.client, "SCAN_IDS", 10)
    names = ["rare" if n in (3, 25) else "work" for n in range(1, 31)]
    ids = client.enqueue_many([{"name": name} for name in names], allow_unknown=True)
    pages: list[list[int]] = []
    cursor = None
    while True:
        page, cursor = client.jobs_page(name="rare", limit=5, cursor=cursor)
        pages.append([j.id for j in page])
        if cursor is None:
            break
    # Newest stretch (ids 21-30), the one below it (11-20, nothing there), the oldest (1-10).
    assert pages == [[ids[24]], [], [ids[2]]]
    unfiltered, more = client.jobs_page(limit=30)
    assert [j.id for j in unfiltered] == ids[::-1] and more is None
