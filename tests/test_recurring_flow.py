"""Recurring schedules with calendars and without overlap, on the real databases with a
controlled clock: blackouts skipped or deferred (across DST), allowed hours, overlap skip
and queue, competing instances, and bad input refused with nothing written."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, func, select

import jobsup
from jobsup.errors import BadInput
from jobsup.store.database import Database
from jobsup.store.schema import audit, calendar, job, recurring_job
from jobsup.store.store import Store
from jobsup.supervisor.recurring import CronTick

BERLIN = "Europe/Berlin"
NIGHT = [{"time": "22:00-06:00"}]


def add(client: jobsup.Client, cron: str = "0 * * * *", now: datetime | None = None, **how: Any) -> None:
    # Through the store's upsert to pin "now"; the client's checks are tested below.
    from jobsup.client.schedules import schedule_policy

    client.store.recurring.recurring_upsert(
        name="report",
        job_name="make-report",
        cron=cron,
        timezone=how.pop("timezone", BERLIN),
        payload="{}",
        queue="default",
        priority=0,
        how=schedule_policy(
            how.get("overlap", "allow"), how.get("calendar"), how.get("mode", "blackout"), how.get("policy", "skip")
        ),
        now=now,
    )


def jobs_of(client: jobsup.Client) -> list[tuple[datetime, datetime, str, int]]:
    with client.database.read() as conn:
        stmt = select(job.c.scheduled_slot, job.c.run_at, job.c.status, job.c.id).where(
            job.c.recurring_name == "report"
        )
        return [tuple(row) for row in conn.execute(stmt.order_by(job.c.scheduled_slot))]  # type: ignore[misc]


def schedule(client: jobsup.Client) -> Any:
    found = client.store.recurring.recurring_get("report")
    assert found is not None
    return found


def hourly(start: datetime, hours: int) -> list[datetime]:
    return [start + timedelta(hours=n) for n in range(hours)]


def test_blackout_slots_are_skipped_and_counted(client: jobsup.Client) -> None:
    client.calendars.add("night", NIGHT, timezone=BERLIN)
    start = datetime(2026, 3, 28, 18, tzinfo=UTC)  # 19:00 CET, the evening before spring-forward
    add(client, now=start - timedelta(minutes=1), calendar="night")
    tick = CronTick(client.store)
    for instant in hourly(start, 14):
        tick.run_once(now=instant)
    fired = [slot for slot, *_ in jobs_of(client)]
    # 19:00, 20:00, 21:00 CET fire; 22:00 CET to 05:00 CEST (seven hours that night) are skipped; 06:00 CEST on.
    assert fired == hourly(start, 3) + hourly(datetime(2026, 3, 29, 4, tzinfo=UTC), 4)
    assert (schedule(client).skipped, schedule(client).last_skipped_at) == (7, datetime(2026, 3, 29, 3, tzinfo=UTC))
    listed = {s.name: s for s in client.schedules.list()}["report"]
    assert (listed.skipped, listed.calendar, listed.calendar_mode) == (7, "night", "blackout")


def test_blackout_slots_are_deferred_to_the_end_of_the_window_across_fall_back(client: jobsup.Client) -> None:
    client.calendars.add("night", NIGHT, timezone=BERLIN)
    start = datetime(2026, 10, 24, 21, tzinfo=UTC)  # 23:00 CEST, the night clocks go back
    add(client, now=start - timedelta(minutes=1), calendar="night", policy="defer_to_end")
    tick = CronTick(client.store)
    for instant in hourly(start, 9):
        tick.run_once(now=instant)
    end = datetime(2026, 10, 25, 5, tzinfo=UTC)  # 06:00 CET: the night was nine hours long
    rows = jobs_of(client)
    # Each slot fires once (02:00 twice on the wall clock, one slot: the cron's rule), one job per slot.
    second_two_oclock = datetime(2026, 10, 25, 1, tzinfo=UTC)
    assert [slot for slot, *_ in rows] == [instant for instant in hourly(start, 9) if instant != second_two_oclock]
    # Seven deferred to the end of the window; the 06:00 CET slot is outside it and due at once.
    assert [run_at for _, run_at, *_ in rows] == [end] * 8
    assert schedule(client).skipped == 0


def test_blackout_slots_are_skipped_across_fall_back(client: jobsup.Client) -> None:
    client.calendars.add("night", NIGHT, timezone=BERLIN)
    start = datetime(2026, 10, 24, 19, tzinfo=UTC)  # 21:00 CEST, the night clocks go back
    add(client, now=start - timedelta(minutes=1), calendar="night")
    tick = CronTick(client.store)
    for instant in hourly(start, 13):
        tick.run_once(now=instant)
    fired = [slot for slot, *_ in jobs_of(client)]
    # 21:00 CEST fires; the nine-hour night (22:00 CEST to 06:00 CET) holds eight slots, the
    # twice-lived 02:00 being one slot; 06:00 CET on fires.
    assert fired == [start, *hourly(datetime(2026, 10, 25, 5, tzinfo=UTC), 3)]
    assert (schedule(client).skipped, schedule(client).last_skipped_at) == (8, datetime(2026, 10, 25, 4, tzinfo=UTC))


def test_blackout_slots_are_deferred_across_spring_forward(client: jobsup.Client) -> None:
    client.calendars.add("night", NIGHT, timezone=BERLIN)
    start = datetime(2026, 3, 28, 20, tzinfo=UTC)  # 21:00 CET, the night clocks go forward
    add(client, now=start - timedelta(minutes=1), calendar="night", policy="defer_to_end")
    tick = CronTick(client.store)
    for instant in hourly(start, 10):
        tick.run_once(now=instant)
    end = datetime(2026, 3, 29, 4, tzinfo=UTC)  # 06:00 CEST: the night was seven hours long
    rows = jobs_of(client)
    assert [slot for slot, *_ in rows] == hourly(start, 10)  # 02:00 does not happen: no slot lost or doubled
    assert [run_at for _, run_at, *_ in rows] == [start] + [end] * 7 + [end, end + timedelta(hours=1)]
    assert schedule(client).skipped == 0


def test_a_public_holiday_skips_the_schedule_s_slot(client: jobsup.Client) -> None:
    client.calendars.add("holidays", [{"holidays": "DE"}], timezone=BERLIN)
    first = datetime(2026, 12, 24, 8, tzinfo=UTC)  # 09:00 CET on Christmas Eve, a working day
    add(client, cron="0 9 * * *", now=first - timedelta(minutes=1), calendar="holidays")
    tick = CronTick(client.store)
    days = [first + timedelta(days=n) for n in range(4)]
    for instant in days:
        tick.run_once(now=instant)
    # The 25th and 26th are public holidays in Germany.
    assert [slot for slot, *_ in jobs_of(client)] == [days[0], days[3]]
    assert schedule(client).skipped == 2


def test_allowed_hours_skip_or_defer_a_slot_outside_them(client: jobsup.Client) -> None:
    hours = [{"weekdays": ["mon", "tue", "wed", "thu", "fri"], "time": "09:00-17:00"}]
    client.calendars.add("business-hours", hours, timezone=BERLIN)
    friday_evening = datetime(2026, 3, 27, 17, tzinfo=UTC)  # 18:00 CET
    add(client, cron="0 18 * * *", now=friday_evening - timedelta(minutes=1), calendar="business-hours", mode="allowed")
    CronTick(client.store).run_once(now=friday_evening)
    assert jobs_of(client) == [] and schedule(client).skipped == 1
    add(client, cron="0 18 * * *", calendar="business-hours", mode="allowed", policy="defer_to_end")
    CronTick(client.store).run_once(now=friday_evening + timedelta(days=1))
    [(slot, run_at, status, _)] = jobs_of(client)
    assert slot == friday_evening + timedelta(days=1)
    assert (run_at, status) == (datetime(2026, 3, 30, 7, tzinfo=UTC), "pending")  # Monday 09:00 CEST


def test_overlap_skip_skips_while_the_last_run_is_live(client: jobsup.Client) -> None:
    start = datetime(2030, 1, 7, 9, tzinfo=UTC)
    add(client, now=start - timedelta(minutes=1), overlap="skip", timezone="UTC")
    tick = CronTick(client.store)
    assert tick.run_once(now=start) == 1
    assert tick.run_once(now=start + timedelta(hours=1)) == 0  # the first job is still pending
    assert tick.run_once(now=start + timedelta(hours=2)) == 0
    assert (schedule(client).skipped, schedule(client).last_skipped_at) == (2, start + timedelta(hours=2))
    [(_, _, _, first)] = jobs_of(client)
    assert client.cancel(first)
    assert tick.run_once(now=start + timedelta(hours=3)) == 1
    assert [slot for slot, *_ in jobs_of(client)] == [start, start + timedelta(hours=3)]


def test_overlap_queue_fires_each_slot_to_wait_behind_the_live_run(client: jobsup.Client) -> None:
    start = datetime(2030, 1, 7, 9, tzinfo=UTC)
    add(client, now=start - timedelta(minutes=1), overlap="queue", timezone="UTC")
    tick = CronTick(client.store)
    assert tick.run_once(now=start) == 1
    assert tick.run_once(now=start + timedelta(hours=1)) == 1  # fired, and waits behind the first
    assert tick.run_once(now=start + timedelta(hours=2)) == 1
    first, second, third = (job_id for *_, job_id in jobs_of(client))
    assert [client.get(i).status for i in (first, second, third)] == ["pending", "waiting", "waiting"]  # type: ignore[union-attr]
    assert client.get(second).concurrency_key == "recurring:report"  # type: ignore[union-attr]
    assert client.cancel(first)  # the live run ends: the next slot's job is let in, in slot order
    assert [client.get(i).status for i in (second, third)] == ["pending", "waiting"]  # type: ignore[union-attr]
    assert schedule(client).skipped == 0


def _tick_in_step(url: str, instants: list[datetime], barrier: Any, outcomes: Any) -> None:
    store = Store(Database(url))
    tick, seen = CronTick(store), Counter[str]()
    for instant in instants:
        barrier.wait(30)  # both instances tick the same instant at once
        for due in store.recurring.recurring_due(now=instant):  # what run_once does, outcomes kept
            seen[str(tick.fire(due, instant))] += 1
    outcomes.put(dict(seen))


@pytest.mark.parametrize("overlap", ["allow", "skip"])
def test_two_instances_firing_at_once_never_fire_a_skipped_slot_or_twice(
    client: jobsup.Client, url: str, overlap: str
) -> None:
    client.calendars.add("quarter", [{"time": "09:15-09:30"}], timezone="UTC")
    start = datetime(2030, 1, 7, 9, 1, tzinfo=UTC)
    add(
        client, cron="* * * * *", now=start - timedelta(seconds=30), calendar="quarter", overlap=overlap, timezone="UTC"
    )
    instants = [start + timedelta(minutes=n) for n in range(40)]
    ctx = multiprocessing.get_context("fork")
    barrier, outcomes = ctx.Barrier(2), ctx.Queue()
    processes = [ctx.Process(target=_tick_in_step, args=(url, instants, barrier, outcomes)) for _ in range(2)]
    for process in processes:
        process.start()
    seen = sum((Counter(outcomes.get(timeout=120)) for _ in processes), Counter[str]())
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    fired = [slot for slot, *_ in jobs_of(client)]
    blackout = [instant for instant in instants if 15 <= instant.minute < 30]
    if overlap == "allow":
        assert fired == [instant for instant in instants if instant not in blackout]
        assert schedule(client).skipped == len(blackout)
    else:  # the first job stays pending: every later slot is skipped, once each
        assert fired == [start]
        assert schedule(client).skipped == len(instants) - 1
    # What the instances said (events, metrics) is what happened: each slot once, by one of them.
    assert (seen["fired"], seen["skipped"]) == (len(fired), schedule(client).skipped)


def test_calendars_are_added_listed_and_removed_audited(client: jobsup.Client) -> None:
    added = client.calendars.add(
        "bank-holidays", [{"holidays": "DE", "subdivision": "BY"}], timezone=BERLIN, actor="ops"
    )
    assert added == {"name": "bank-holidays", "timezone": BERLIN, "rules": [{"holidays": "DE", "subdivision": "BY"}]}
    client.calendars.add("bank-holidays", [{"holidays": "DE"}], timezone=BERLIN, actor="ops")
    [row] = client.calendars.list()
    assert (row["name"], row["rules"]) == ("bank-holidays", [{"holidays": "DE"}])
    client.add_recurring("report", job="make-report", cron="0 9 * * *", calendar="bank-holidays", allow_unknown=True)
    with pytest.raises(BadInput, match="used by schedule\\(s\\) report"):
        client.calendars.remove("bank-holidays", actor="ops")
    assert client.schedules.remove("report")
    assert client.calendars.remove("bank-holidays", actor="ops")
    assert not client.calendars.remove("bank-holidays", actor="ops")
    with client.database.read() as conn:
        actions = conn.execute(select(audit.c.action, audit.c.outcome).where(audit.c.target == "bank-holidays"))
        assert sorted(actions) == sorted(
            [
                ("calendar.add", "ok"),
                ("calendar.update", "ok"),
                ("calendar.remove", "ok"),
                ("calendar.remove", "not_found"),
            ]
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"calendar": "nope"}, "calendar 'nope' is not known"),
        ({"overlap": "sometimes"}, "overlap 'sometimes' is not known"),
        ({"calendar_mode": "weekends"}, "calendar_mode 'weekends' is not known"),
        ({"calendar_policy": "later"}, "calendar_policy 'later' is not known"),
    ],
)
def test_bad_schedule_options_are_refused_with_nothing_written(
    client: jobsup.Client, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(BadInput, match=message):
        client.add_recurring("report", job="make-report", cron="0 9 * * *", allow_unknown=True, **options)
    with client.database.read() as conn:
        assert conn.execute(select(func.count()).select_from(recurring_job)).scalar() == 0


def test_a_bad_calendar_is_refused_with_nothing_written(client: jobsup.Client) -> None:
    for rules in (
        [],
        [{"time": "25:00-26:00"}],
        [{"dates": "2026-12-26..2026-12-24"}],
        [{"holidays": "DE", "subdivision": "XX"}],
    ):
        with pytest.raises(BadInput):
            client.calendars.add("bad", rules)
    with client.database.read() as conn:
        assert conn.execute(select(func.count()).select_from(calendar)).scalar() == 0


@pytest.mark.postgres
def test_a_calendar_removed_while_a_schedule_naming_it_is_written_stays(postgres_url: str) -> None:
    client = jobsup.Client(postgres_url)
    client.calendars.add("closures", [{"weekdays": ["sat", "sun"]}], timezone=BERLIN)
    removal: list[object] = []

    def remove() -> None:
        try:
            removal.append(client.calendars.remove("closures"))
        except BadInput as exc:
            removal.append(exc)

    def meanwhile(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # The schedule's write is under way (its transaction open): a removal starts now.
        if statement.startswith("INSERT INTO jobsup_recurring_job") and not removal:
            remover = threading.Thread(target=remove)
            remover.start()
            remover.join(timeout=1.0)  # it cannot finish while the schedule holds the calendar
            removal.append(remover)

    event.listen(client.database.engine, "before_cursor_execute", meanwhile)
    client.add_recurring("weekday-report", job="make-report", cron="0 9 * * *", calendar="closures", allow_unknown=True)
    event.remove(client.database.engine, "before_cursor_execute", meanwhile)
    remover = removal[0]
    assert isinstance(remover, threading.Thread)
    remover.join(timeout=30)
    # Before: the removal deleted the calendar at once, and the schedule named a missing one.
    assert isinstance(removal[1], BadInput) and "weekday-report" in str(removal[1])
    assert client.store.calendars.calendar_get("closures") is not None
    client.close()
