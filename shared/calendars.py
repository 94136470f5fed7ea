"""Calendars: named sets of instants, described by rules, evaluated in one time zone.

A calendar's rules are a JSON list; an instant is *in* the calendar when any rule matches it
(rules are ORed), and a rule matches when every condition it names matches (ANDed). Each
condition is tested on the instant's local date and wall-clock time in the calendar's zone:

- ``{"weekdays": ["sat", "sun"]}``: those days (mon tue wed thu fri sat sun);
- ``{"time": "22:00-06:00"}``: from the first time up to (not including) the second; a range
  whose end is not after its start wraps midnight; ``24:00`` is the end of the day;
- ``{"dates": "2026-12-24..2026-12-26"}``: those dates, both ends included (one date, or a
  list of either);
- ``{"days_of_month": [1, 15]}``: those days of each month;
- ``{"holidays": "DE", "subdivision": "BY"}``: the public holidays of a country (and region),
  from the `holidays` package.

DST: conditions read the local wall clock, so ``"time": "01:00-03:00"`` is two hours on most
nights, one on the spring-forward night (02:00-03:00 does not exist) and three on the
fall-back night (02:00-03:00 happens twice). The instants where membership can change (local
midnights, the ends of time ranges, the zone's own transitions) are enumerated day by day,
so `next_outside` and `next_inside` are exact to the second and look ahead `HORIZON` days.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from jobsup.cron import zone
from jobsup.errors import BadInput, ConfigurationError

HORIZON = 800  # days searched ahead for the end or start of a window
MAX_RULES = 100
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_KEYS = {"weekdays", "time", "dates", "days_of_month", "holidays", "subdivision"}
_CLOCK = re.compile(r"([01]\d|2[0-4]):([0-5]\d)")
_HELP = "see docs/how-to/calendars.md"


@dataclass(frozen=True)
class Rule:
    """One rule: every condition it names (None: not named) must match."""

    weekdays: frozenset[int] | None = None
    time: tuple[time, time | None] | None = None  # (start, end); end None: midnight
    dates: tuple[tuple[date, date], ...] | None = None
    days_of_month: frozenset[int] | None = None
    holidays: tuple[str, str | None] | None = None  # (country, subdivision)

    def matches_day(self, day: date) -> bool:
        """Whether the rule's date conditions hold on `day` (its time range aside)."""
        if self.weekdays is not None and day.weekday() not in self.weekdays:
            return False
        if self.dates is not None and not any(start <= day <= end for start, end in self.dates):
            return False
        if self.days_of_month is not None and day.day not in self.days_of_month:
            return False
        return self.holidays is None or day in _holidays(*self.holidays, day.year)

    def matches(self, local: datetime) -> bool:
        if self.time is not None:
            start, end = self.time
            clock = local.time()
            if end is None:
                inside = clock >= start
            elif start < end:
                inside = start <= clock < end
            else:  # wraps midnight
                inside = clock >= start or clock < end
            if not inside:
                return False
        return self.matches_day(local.date())


@dataclass(frozen=True)
class Calendar:
    """A named calendar: `rules` evaluated in `timezone`."""

    name: str
    timezone: str
    rules: tuple[Rule, ...]

    @property
    def zone(self) -> ZoneInfo:
        return zone(self.timezone)

    def contains(self, instant: datetime) -> bool:
        local = instant.astimezone(self.zone).replace(tzinfo=None)
        return any(rule.matches(local) for rule in self.rules)

    def next_outside(self, instant: datetime) -> datetime | None:
        """`instant` if it is outside, else the first instant after it that is (the end of
        its window); None if the window lasts past the horizon."""
        return self._next(instant, want=False)

    def next_inside(self, instant: datetime) -> datetime | None:
        """`instant` if it is inside, else the first instant after it that is (the start of
        the next window); None if none begins within the horizon."""
        return self._next(instant, want=True)

    def _next(self, instant: datetime, *, want: bool) -> datetime | None:
        if self.contains(instant) == want:
            return instant
        for candidate in self._changes(instant):
            if self.contains(candidate) == want:
                return candidate
        return None

    def _changes(self, after: datetime) -> Iterator[datetime]:
        """Every instant after `after` at which membership may change, in order."""
        tz = self.zone
        clocks = sorted(
            {time(0)} | {edge for rule in self.rules if rule.time for edge in rule.time if edge is not None}
        )
        day = after.astimezone(tz).date() - timedelta(days=1)
        for _ in range(HORIZON + 2):
            found = {instant for clock in clocks for instant in _instants(datetime.combine(day, clock), tz)}
            found |= set(_transitions(day, tz))
            yield from sorted(instant for instant in found if instant > after)
            day += timedelta(days=1)

    def describe(self) -> list[dict[str, Any]]:
        return [describe_rule(rule) for rule in self.rules]


def parse_calendar(name: str, rules: object, timezone: object = "UTC") -> Calendar:
    """A calendar from its JSON rules (a list, or its text), or `BadInput` naming what is wrong."""
    tz = zone(timezone).key
    if isinstance(rules, str):
        try:
            rules = json.loads(rules)
        except ValueError:
            raise BadInput(f"calendar {name!r}: rules are not JSON; {_HELP}") from None
    if isinstance(rules, dict):
        rules = [rules]
    if not isinstance(rules, list) or not rules:
        raise BadInput(f'calendar {name!r}: give a non-empty list of rules like [{{"weekdays": ["sat", "sun"]}}]')
    if len(rules) > MAX_RULES:
        raise BadInput(f"calendar {name!r}: at most {MAX_RULES} rules, not {len(rules)}")
    parsed = tuple(parse_rule(rule, f"calendar {name!r} rule {position + 1}") for position, rule in enumerate(rules))
    return Calendar(name, tz, parsed)


def parse_rule(value: object, where: str) -> Rule:
    if not isinstance(value, dict) or not value:
        raise BadInput(f'{where}: a rule is an object of conditions like {{"time": "22:00-06:00"}}, not {value!r}')
    unknown = set(value) - _KEYS
    if unknown:
        raise BadInput(
            f"{where}: unknown condition {sorted(unknown)[0]!r}; use one of {sorted(_KEYS - {'subdivision'})}"
        )
    if "subdivision" in value and "holidays" not in value:
        raise BadInput(
            f'{where}: \'subdivision\' goes with \'holidays\' (e.g. {{"holidays": "DE", "subdivision": "BY"}})'
        )
    rule = Rule(
        weekdays=None if "weekdays" not in value else _weekdays(value["weekdays"], where),
        time=None if "time" not in value else _time_range(value["time"], where),
        dates=None if "dates" not in value else _dates(value["dates"], where),
        days_of_month=None if "days_of_month" not in value else _days_of_month(value["days_of_month"], where),
        holidays=None if "holidays" not in value else _country(value["holidays"], value.get("subdivision"), where),
    )
    if not _ever_matches(rule):
        raise BadInput(f"{where}: its conditions together never match a day; {_HELP}")
    return rule


def describe_rule(rule: Rule) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rule.weekdays is not None:
        out["weekdays"] = [WEEKDAYS[day] for day in sorted(rule.weekdays)]
    if rule.time is not None:
        start, end = rule.time
        out["time"] = f"{start:%H:%M}-{'24:00' if end is None else f'{end:%H:%M}'}"
    if rule.dates is not None:
        out["dates"] = [f"{start}..{end}" if start != end else str(start) for start, end in rule.dates]
    if rule.days_of_month is not None:
        out["days_of_month"] = sorted(rule.days_of_month)
    if rule.holidays is not None:
        out["holidays"] = rule.holidays[0]
        if rule.holidays[1] is not None:
            out["subdivision"] = rule.holidays[1]
    return out


def _weekdays(value: object, where: str) -> frozenset[int]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(day, str) for day in value):
        raise BadInput(f"{where}: weekdays is a non-empty list of {', '.join(WEEKDAYS)}, not {value!r}")
    bad = [day for day in value if day.lower()[:3] not in WEEKDAYS]
    if bad:
        raise BadInput(f"{where}: {bad[0]!r} is not a weekday; use {', '.join(WEEKDAYS)}")
    return frozenset(WEEKDAYS.index(day.lower()[:3]) for day in value)


def _time_range(value: object, where: str) -> tuple[time, time | None]:
    parts = value.split("-") if isinstance(value, str) else []
    clocks = [_CLOCK.fullmatch(part.strip()) for part in parts]
    if len(parts) != 2 or not all(clocks) or any(int(m.group(1)) == 24 and m.group(2) != "00" for m in clocks if m):
        raise BadInput(f"{where}: time is 'HH:MM-HH:MM' with hours 00-23 (24:00 as an end), not {value!r}")
    start, end = ((int(m.group(1)), int(m.group(2))) for m in clocks if m)
    if start == end or start == (24, 0):
        raise BadInput(f"{where}: time {value!r} is empty; a range needs two different times (00:00-24:00 is all day)")
    return time(*start), None if end in ((24, 0), (0, 0)) else time(*end)


def _dates(value: object, where: str) -> tuple[tuple[date, date], ...]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise BadInput(f"{where}: dates is a non-empty list")
    ranges = []
    for item in items:
        ends = item.split("..") if isinstance(item, str) else []
        try:
            start, end = (date.fromisoformat(ends[0].strip()), date.fromisoformat(ends[-1].strip()))
        except (IndexError, ValueError):
            raise BadInput(f"{where}: dates are 'YYYY-MM-DD' or 'YYYY-MM-DD..YYYY-MM-DD', not {item!r}") from None
        if len(ends) > 2 or end < start:
            raise BadInput(f"{where}: date range {item!r} ends before it starts; write the earlier date first")
        ranges.append((start, end))
    return tuple(ranges)


def _days_of_month(value: object, where: str) -> frozenset[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value or not all(_day_number(day) for day in value):
        raise BadInput(f"{where}: days_of_month is a non-empty list of days 1-31, not {value!r}")
    return frozenset(value)


def _day_number(day: object) -> bool:
    return isinstance(day, int) and not isinstance(day, bool) and 1 <= day <= 31


def _holiday_data(where: str) -> Any:
    """The `holidays` package, which only calendars with public holidays need (an extra)."""
    try:
        import holidays
    except ImportError:
        raise ConfigurationError(
            f"{where}: public holidays need the holidays package: pip install 'jobsup[calendars]'"
        ) from None
    return holidays


def _country(country: object, subdivision: object, where: str) -> tuple[str, str | None]:
    if not isinstance(country, str) or (subdivision is not None and not isinstance(subdivision, str)):
        raise BadInput(f"{where}: holidays is a country code like 'US' (subdivision a region code like 'BY')")
    try:
        _holiday_data(where).country_holidays(country, subdiv=subdivision)
    except NotImplementedError as exc:
        raise BadInput(
            f"{where}: no public holidays known for {country!r}{'' if subdivision is None else f'/{subdivision!r}'} "
            f"({exc}); use an ISO 3166 country code and one of its subdivisions"
        ) from None
    return country, subdivision


@lru_cache(maxsize=256)
def _holidays(country: str, subdivision: str | None, year: int) -> frozenset[date]:
    return frozenset(_holiday_data("calendar").country_holidays(country, subdiv=subdivision, years=year))


def _ever_matches(rule: Rule) -> bool:
    """Whether some day within the rule's dates (or, if it names none, within four years)
    matches it: a year's weekdays and days of month, and holidays that fall each year."""
    if rule.dates is not None:
        return any(
            rule.matches_day(start + timedelta(days=n))
            for start, end in rule.dates
            for n in range((end - start).days + 1)
        )
    day = date(2024, 1, 1)  # a leap year: 29 February, and every weekday and day of month
    return any(rule.matches_day(day + timedelta(days=n)) for n in range(4 * 366))


def _instants(local: datetime, tz: ZoneInfo) -> Sequence[datetime]:
    """The instants a wall-clock time names: one, two in a fall-back overlap, or the end of
    its gap (when the clock passes it) in a spring-forward gap."""
    found = []
    for fold in (0, 1):
        aware = local.replace(tzinfo=tz, fold=fold)
        instant = aware.astimezone(UTC)
        if instant.astimezone(tz).replace(tzinfo=None) == local:
            found.append(instant)
    return found  # empty in a gap: the clock passes it at the transition, which `_transitions` gives


def _transitions(day: date, tz: ZoneInfo) -> Iterator[datetime]:
    """The zone's offset changes on `day`, found to the second."""
    low = int(datetime.combine(day, time(0), tz).timestamp())
    high = low + 86400

    def offset(seconds: int) -> timedelta | None:
        return datetime.fromtimestamp(seconds, UTC).astimezone(tz).utcoffset()

    if offset(low) == offset(high):
        return
    while high - low > 1:  # the first second with the new offset
        middle = (low + high) // 2
        if offset(middle) == offset(low):
            low = middle
        else:
            high = middle
    yield datetime.fromtimestamp(high, UTC)
