"""Cron slots in a time zone, with the DST behaviour decided once, here.

Slots are the cron expression's *local* wall-clock times in the schedule's time zone:

- a slot inside a DST gap (02:30 on the night clocks jump from 02:00 to 03:00) fires at the
  end of the gap, at the first local time that exists (03:00); several slots inside one gap
  fire once;
- a slot inside a DST overlap (01:30 on the night clocks fall back from 02:00 to 01:00)
  fires once, at its first occurrence.

Every slot is returned as an aware UTC instant.

Finding the slot to fire after downtime costs the same for a minute or a year of it: it is
searched backwards from now (`latest_slot`), never stepped forwards from the last fired
slot. Expressions with a seconds field (six fields) are refused: schedules fire at minute
resolution, on a tick of about a second.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from jobsup.errors import BadInput

_LONGEST_GAP = timedelta(hours=3)


def check_cron(cron: object) -> str:
    """`cron`, or `BadInput` saying what is wrong with it."""
    _check_syntax(cron)
    assert isinstance(cron, str)
    next_slot(cron, "UTC", datetime(2000, 1, 1, tzinfo=UTC))  # valid fields can still never match
    return cron


def _check_syntax(cron: object) -> None:
    if not isinstance(cron, str) or not croniter.is_valid(cron):
        raise BadInput(
            f"cron {cron!r} is not a valid cron expression; write five fields like '*/5 * * * *' or '@hourly'"
        )
    if not cron.strip().startswith("@") and len(cron.split()) != 5:
        raise BadInput(
            f"cron {cron!r} has {len(cron.split())} fields; jobsup takes five (minute hour day month weekday): "
            "schedules fire at minute resolution, so a seconds field is not supported"
        )


def zone(name: object) -> ZoneInfo:
    try:
        if not isinstance(name, str) or not name:
            raise ZoneInfoNotFoundError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder of zones ("Europe"), a name too long
        raise BadInput(
            f"time zone {name!r} is not known{_near(name)}; use an IANA name like 'UTC' or 'Europe/Berlin'"
        ) from None


def _near(name: object) -> str:
    """`` (did you mean 'Europe/Berlin'?)`` for a misspelt zone; read only on that error."""
    import difflib
    from zoneinfo import available_timezones

    close = difflib.get_close_matches(str(name), sorted(available_timezones()), n=2, cutoff=0.8)
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


def next_slot(cron: str, timezone: str, after: datetime) -> datetime:
    """The first slot strictly after the instant `after`."""
    tz = zone(timezone)
    local = after.astimezone(tz).replace(tzinfo=None)
    # Start an hour early: in an overlap, local times before `after`'s may map to later instants.
    candidates = _croniter(cron, local - timedelta(hours=1))
    try:
        while True:
            instant = _instant(candidates.get_next(datetime), tz)
            if instant > after:
                return instant
    except CroniterError as exc:
        raise BadInput(f"cron {cron!r} never matches a real date ({exc})") from None


def next_slots(
    cron: str, timezone: str, after: datetime, count: int, *, first: datetime | None = None
) -> list[datetime]:
    """The `count` slots after `after` (from `first` if given: a schedule's due slot), in
    order, as times of `timezone`: what the recurring page and the schedule form show."""
    local = zone(timezone)
    slots: list[datetime] = []
    while len(slots) < count:
        slot = first if first is not None and not slots else next_slot(cron, timezone, after)
        slots.append(slot.astimezone(local))
        after = slot
    return slots


def latest_slot(cron: str, timezone: str, since: datetime, now: datetime) -> datetime:
    """The last slot at or before `now`, and not before the due slot `since` (missed slots
    collapse into this one). Searched backwards from now: its cost does not grow with the
    downtime."""
    tz = zone(timezone)
    local = now.astimezone(tz).replace(tzinfo=None)
    # Start an hour late: in an overlap, local times after now's may map to earlier instants.
    candidates = _croniter(cron, local + timedelta(hours=1))
    try:
        while True:
            instant = _instant(candidates.get_prev(datetime), tz)
            if instant <= now:
                return max(instant, since)
    except CroniterError:
        return since  # no slot before now at all: the due one is the latest


def _croniter(cron: str, start: datetime) -> croniter:
    _check_syntax(cron)  # a row may have been edited to anything
    return croniter(cron, start)


def _instant(local: datetime, tz: ZoneInfo) -> datetime:
    """A naive local time as a UTC instant: its first occurrence, or the end of its gap."""
    probe = local
    while probe - local <= _LONGEST_GAP:
        aware = probe.replace(tzinfo=tz, fold=0)
        if aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == probe:
            return aware.astimezone(UTC)
        probe = (probe + timedelta(minutes=1)).replace(second=0, microsecond=0)
    raise BadInput(f"no valid local time follows {local} in {tz.key}")  # no real zone has such a gap
