"""The calendar policy of a job type (see `jobsup.flow`): its jobs' run_at is pushed, when
they are enqueued, to the next instant the named calendar allows. ``calendar="business-hours"``
or ``calendar={"name": "business-hours", "mode": "allowed"}``: run only inside the calendar;
``"mode": "blackout"``: never start inside it (run_at moves to the end of the window).

The calendar is read from the database by the enqueuing client (`jobsup.flow.calendar_use`),
so registration only checks the shape; an unknown calendar is refused at enqueue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobsup.errors import BadInput
from jobsup.registry import check_name

MODES = ("allowed", "blackout")


@dataclass(frozen=True)
class CalendarUse:
    name: str
    mode: str = "allowed"  # allowed | blackout


def parse(value: object, job: str) -> CalendarUse:
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict) or set(value) - {"name", "mode"} or "name" not in value:
        raise BadInput(f"job {job!r}: calendar takes a name or {{'name': NAME, 'mode': 'allowed'}}, not {value!r}")
    mode = value.get("mode", "allowed")
    if mode not in MODES:
        raise BadInput(f"job {job!r}: calendar mode {mode!r} is not known; use 'allowed' or 'blackout'")
    return CalendarUse(check_name(value["name"], f"job {job!r}: calendar name"), mode)


def describe(policy: CalendarUse) -> dict[str, Any]:
    return {"name": policy.name, "mode": policy.mode}


def load(described: Any) -> CalendarUse:
    return CalendarUse(str(described["name"]), str(described.get("mode", "allowed")))
