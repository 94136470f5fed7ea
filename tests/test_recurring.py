"""Recurring schedules with a controlled clock: on schedule, once per slot across competing
processes, missed slots collapsed, DST decided, bad crons refused or skipped."""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, text

import jobsup
from jobsup.cron import next_slot
from jobsup.store.database import Database
from jobsup.store.firing import ALREADY_FIRED, FIRED
from jobsup.store.recurring import RecurringStore
from jobsup.store.schema import job
from jobsup.store.store import Store
from jobsup.supervisor.recurring import CronTick

T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)  # a Monday


def add(store: RecurringStore, name: str = "report", cron: str = "*/5 * * * *", tz: str = "UTC", **kw: Any):  # type: ignore[no-untyped-def]
    return store.recurring_upsert(
        name=name,
        job_name=kw.pop("job", "make-report"),
        cron=cron,
        timezone=tz,
        payload=kw.pop("payload", '{"kind":"daily"}'),
        queue="default",
        priority=0,
        now=kw.pop("now", T0),
    )


def fired_slots(client: jobsup.Client, name: str = "report") -> list[datetime]:
    with client.database.read() as conn:
        rows = conn.execute(
            select(job.c.scheduled_slot).where(job.c.recurring_name == name).order_by(job.c.scheduled_slot)
        ).scalars()
        return list(rows)


def test_fires_each_slot_on_schedule(client: jobsup.Client) -> None:
    store, tick = client.store.recurring, CronTick(client.store)
    schedule = add(store)
    assert schedule.next_run_at == T0 + timedelta(minutes=5)
    assert tick.run_once(now=T0 + timedelta(minutes=4, seconds=59)) == 0
    assert tick.run_once(now=T0 + timedelta(minutes=5)) == 1
    assert tick.run_once(now=T0 + timedelta(minutes=5, seconds=1)) == 0  # an early or repeated tick
    assert tick.run_once(now=T0 + timedelta(minutes=10)) == 1
    assert fired_slots(client) == [T0 + timedelta(minutes=5), T0 + timedelta(minutes=10)]
    fired = client.list_jobs()[0]
    assert (fired.name, fired.payload, fired.status) == ("make-report", {"kind": "daily"}, "pending")


def test_missed_slots_collapse_into_one_run(client: jobsup.Client) -> None:
    store = client.store.recurring
    add(store)
    assert CronTick(client.store).run_once(now=T0 + timedelta(hours=3, minutes=2)) == 1
    assert fired_slots(client) == [T0 + timedelta(hours=3)]
    assert store.recurring_get("report").next_run_at == T0 + timedelta(hours=3, minutes=5)  # type: ignore[union-attr]


def test_a_stale_fire_is_counted_as_already_fired(client: jobsup.Client) -> None:
    store = client.store.recurring
    schedule = add(store)
    at = T0 + timedelta(minutes=5)
    assert client.store.transitions.fire(store, schedule, now=at) == FIRED
    assert client.store.transitions.fire(store, schedule, now=at) == ALREADY_FIRED  # the same view again: CAS fails
    assert len(fired_slots(client)) == 1


def test_upsert_keeps_the_next_run_unless_the_cron_changes(client: jobsup.Client) -> None:
    store = client.store.recurring
    add(store)
    again = add(store, now=T0 + timedelta(minutes=3), payload='{"kind":"weekly"}')
    assert again.next_run_at == T0 + timedelta(minutes=5) and again.payload == {"kind": "weekly"}
    changed = add(store, cron="0 * * * *", now=T0 + timedelta(minutes=3))
    assert changed.next_run_at == T0 + timedelta(hours=1)


def _tick_repeatedly(url: str, instants: list[datetime], start: Any) -> None:
    tick = CronTick(Store(Database(url)))
    start.wait(30)
    for instant in instants:
        for _ in range(3):
            tick.run_once(now=instant)


@pytest.mark.slow
def test_exactly_once_per_slot_across_four_competing_processes(client: jobsup.Client, url: str) -> None:
    add(client.store.recurring, cron="* * * * *")
    instants = [T0 + timedelta(minutes=m, seconds=s) for m in range(1, 31) for s in (0, 20, 40)]
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    processes = [ctx.Process(target=_tick_repeatedly, args=(url, instants, start)) for _ in range(4)]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    assert fired_slots(client) == [T0 + timedelta(minutes=m) for m in range(1, 31)]


def test_dst_gap_fires_at_the_gap_end_and_overlap_fires_once() -> None:
    berlin = "Europe/Berlin"
    # 2030-03-31: clocks jump from 02:00 to 03:00 CEST; 02:30 does not exist.
    assert next_slot("30 2 * * *", berlin, datetime(2030, 3, 30, 12, tzinfo=UTC)) == datetime(
        2030, 3, 31, 1, 0, tzinfo=UTC
    )
    assert next_slot("30 2 * * *", berlin, datetime(2030, 3, 31, 1, 0, tzinfo=UTC)) == datetime(
        2030, 4, 1, 0, 30, tzinfo=UTC
    )
    # 2030-10-27: clocks fall back from 03:00 CEST to 02:00 CET; 02:30 happens twice.
    first = next_slot("30 2 * * *", berlin, datetime(2030, 10, 26, 12, tzinfo=UTC))
    assert first == datetime(2030, 10, 27, 0, 30, tzinfo=UTC)  # 02:30 CEST, the first occurrence
    assert next_slot("30 2 * * *", berlin, first) == datetime(2030, 10, 28, 1, 30, tzinfo=UTC)


def test_a_schedule_fires_once_in_a_dst_gap_and_once_in_an_overlap(client: jobsup.Client) -> None:
    store, tick = client.store.recurring, CronTick(client.store)
    add(store, cron="*/20 2 * * *", tz="Europe/Berlin", now=datetime(2030, 3, 30, 23, 0, tzinfo=UTC))
    for minute in range(0, 240, 5):  # 00:00 to 04:00 UTC, across the gap
        tick.run_once(now=datetime(2030, 3, 31, 0, 0, tzinfo=UTC) + timedelta(minutes=minute))
    assert fired_slots(client) == [datetime(2030, 3, 31, 1, 0, tzinfo=UTC)]


def test_a_cron_that_never_matches_is_refused_and_skipped(client: jobsup.Client) -> None:
    with pytest.raises(jobsup.BadInput, match="never matches a real date"):
        client.add_recurring("february-30", job="x", cron="0 0 30 2 *")
    store = client.store.recurring
    add(store, name="fine")
    add(store, name="edited")
    with client.database.transaction() as conn:
        conn.execute(text("UPDATE jobsup_recurring_job SET cron = '0 0 30 2 *' WHERE name = 'edited'"))
    assert CronTick(client.store).run_once(now=T0 + timedelta(minutes=5)) == 1
    assert fired_slots(client, "fine") == [T0 + timedelta(minutes=5)]


def test_bad_cron_and_zone_are_refused_when_added(client: jobsup.Client) -> None:
    with pytest.raises(jobsup.BadInput, match="cron '61 \\* \\* \\* \\*' is not a valid cron expression"):
        client.add_recurring("bad", job="x", cron="61 * * * *")
    with pytest.raises(jobsup.BadInput, match="time zone 'Mars/Olympus' is not known"):
        client.add_recurring("bad", job="x", cron="* * * * *", timezone="Mars/Olympus")
    assert client.schedules.list() == []


def test_a_row_edited_to_a_bad_cron_is_skipped_without_stopping_others(
    client: jobsup.Client, caplog: pytest.LogCaptureFixture
) -> None:
    store = client.store.recurring
    add(store, name="broken")
    add(store, name="fine")
    with client.database.transaction() as conn:
        conn.execute(text("UPDATE jobsup_recurring_job SET cron = 'every tuesday' WHERE name = 'broken'"))
    tick = CronTick(client.store)
    with caplog.at_level("WARNING", logger="jobsup"):
        assert tick.run_once(now=T0 + timedelta(minutes=5)) == 1
        assert tick.run_once(now=T0 + timedelta(minutes=10)) == 1
    assert fired_slots(client, "fine") == [T0 + timedelta(minutes=5), T0 + timedelta(minutes=10)]
    warnings = [r.getMessage() for r in caplog.records if "recurring.invalid" in r.getMessage()]
    assert len(warnings) == 1 and "schedule=broken" in warnings[0]


def test_enable_disable_remove_and_list(client: jobsup.Client) -> None:
    schedule = client.add_recurring("nightly", job="cleanup", cron="0 3 * * *", timezone="Europe/Berlin")
    assert schedule.enabled and schedule.timezone == "Europe/Berlin"
    assert client.schedules.set_enabled("nightly", False)
    assert not client.schedules.list()[0].enabled
    assert client.schedules.set_enabled("nightly", True)
    assert not client.schedules.set_enabled("missing", True)
    assert client.schedules.remove("nightly") and not client.schedules.remove("nightly")
