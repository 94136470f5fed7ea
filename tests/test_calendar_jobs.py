"""A job type's calendar: its jobs' run_at is pushed at enqueue into what the calendar
allows, read from the database by the enqueuing client."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import jobsup
from jobsup.errors import BadInput

BERLIN = "Europe/Berlin"


def test_a_job_type_calendar_pushes_run_at_at_enqueue(client: jobsup.Client) -> None:
    hours = [{"weekdays": ["mon", "tue", "wed", "thu", "fri"], "time": "09:00-17:00"}]
    client.calendars.add("business-hours", hours, timezone=BERLIN)

    @jobsup.job("office-task", calendar={"name": "business-hours", "mode": "allowed"})
    def office_task() -> None: ...

    saturday = datetime(2026, 3, 28, 12, tzinfo=UTC)
    job_id = client.enqueue("office-task", run_at=saturday)
    found = client.get(job_id)
    assert found is not None and found.run_at == datetime(2026, 3, 30, 7, tzinfo=UTC)  # Monday 09:00 CEST
    inside = datetime(2026, 3, 30, 8, tzinfo=UTC)
    [kept] = client.enqueue_many([{"name": "office-task", "run_at": inside}])
    assert client.get(kept).run_at == inside  # type: ignore[union-attr]

    @jobsup.job("lost-task", calendar="no-such-calendar")
    def lost_task() -> None: ...

    with pytest.raises(BadInput, match="calendar 'no-such-calendar', which is not known"):
        client.enqueue("lost-task")


def test_the_policy_is_checked_at_registration_and_published_in_the_definition() -> None:
    from jobsup.policies import CalendarUse, Limits

    limits = Limits.parse("t", calendar="business-hours")
    assert limits.describe() == {"calendar": {"name": "business-hours", "mode": "allowed"}}
    assert Limits.load(limits.describe()).calendar == CalendarUse("business-hours", "allowed")
    for bad, message in (({"name": "x", "mode": "sometimes"}, "mode 'sometimes'"), ({"when": "x"}, "takes a name")):
        with pytest.raises(BadInput, match=message):
            Limits.parse("t", calendar=bad)


def test_the_async_client_pushes_run_at_too(client: jobsup.Client, url: str) -> None:
    import asyncio

    client.calendars.add("weekend", [{"weekdays": ["sat", "sun"]}], timezone="UTC")

    @jobsup.job("weekend-task", calendar="weekend")
    def weekend_task() -> None: ...

    async def enqueue() -> int:
        async_client = jobsup.AsyncClient(url)
        try:
            return await async_client.enqueue("weekend-task", run_at=datetime(2026, 3, 25, 12, tzinfo=UTC))
        finally:
            await async_client.close()

    found = client.get(asyncio.run(enqueue()))
    assert found is not None and found.run_at == datetime(2026, 3, 28, tzinfo=UTC)  # Saturday 00:00
