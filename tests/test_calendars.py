"""Calendar rules, evaluated in their zone: each condition, their combination, the
spring-forward and fall-back nights in Europe/Berlin, a public holiday, and bad rules."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobsup.calendars import parse_calendar
from jobsup.errors import BadInput

BERLIN = "Europe/Berlin"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def test_each_condition_and_their_combination() -> None:
    weekend = parse_calendar("weekend", [{"weekdays": ["sat", "sun"]}], BERLIN)
    assert weekend.contains(at("2026-12-05T00:00:00+01:00"))  # Saturday, local midnight
    assert not weekend.contains(at("2026-12-04T23:59:59+01:00"))
    assert weekend.next_outside(at("2026-12-05T12:00:00+01:00")) == at("2026-12-07T00:00:00+01:00")
    xmas = parse_calendar("xmas", [{"dates": "2026-12-24..2026-12-26"}, {"days_of_month": [1]}], "UTC")
    assert xmas.contains(at("2026-12-26T23:00:00+00:00")) and not xmas.contains(at("2026-12-27T00:00:00+00:00"))
    assert xmas.contains(at("2027-01-01T10:00:00+00:00"))  # the other rule: rules are ORed
    assert xmas.next_inside(at("2026-12-02T10:00:00+00:00")) == at("2026-12-24T00:00:00+00:00")
    evenings = parse_calendar("weekday-evenings", [{"weekdays": ["mon", "tue"], "time": "18:00-20:00"}], "UTC")
    assert evenings.contains(at("2026-11-30T19:00:00+00:00"))  # a Monday: both conditions
    assert not evenings.contains(at("2026-12-02T19:00:00+00:00"))  # a Wednesday: only one
    assert evenings.next_inside(at("2026-12-01T20:00:00+00:00")) == at("2026-12-07T18:00:00+00:00")


def test_a_time_range_wraps_midnight() -> None:
    night = parse_calendar("night", [{"time": "22:00-06:00"}], "UTC")
    assert night.contains(at("2026-06-01T23:30:00+00:00")) and night.contains(at("2026-06-02T05:59:59+00:00"))
    assert not night.contains(at("2026-06-02T06:00:00+00:00"))
    assert night.next_outside(at("2026-06-01T22:00:00+00:00")) == at("2026-06-02T06:00:00+00:00")
    assert night.next_inside(at("2026-06-02T12:00:00+00:00")) == at("2026-06-02T22:00:00+00:00")


def test_a_night_window_across_spring_forward_and_fall_back() -> None:
    night = parse_calendar("night", [{"time": "22:00-06:00"}], BERLIN)
    # 2026-03-29: 02:00 CET becomes 03:00 CEST; the window is 7 hours long, and ends at 06:00 CEST.
    assert night.next_outside(at("2026-03-28T22:30:00+01:00")) == at("2026-03-29T06:00:00+02:00")
    assert night.next_outside(at("2026-03-28T22:30:00+01:00")) == at("2026-03-29T04:00:00+00:00")
    # 2026-10-25: 03:00 CEST becomes 02:00 CET; the window is 9 hours long, and ends at 06:00 CET.
    assert night.next_outside(at("2026-10-24T22:30:00+02:00")) == at("2026-10-25T05:00:00+00:00")
    assert night.contains(at("2026-10-25T01:30:00+00:00"))  # 02:30 CET, the second 02:30


def test_a_range_inside_the_dst_hour_is_missing_then_doubled() -> None:
    odd = parse_calendar("odd", [{"time": "02:30-03:00"}], BERLIN)
    # Spring forward: 02:30 never happens on 2026-03-29; the next one is on 03-30 (CEST).
    assert odd.next_inside(at("2026-03-29T00:00:00+00:00")) == at("2026-03-30T02:30:00+02:00")
    # Fall back: 02:30-03:00 happens twice, in CEST and again in CET, with 02:00-02:30 CET between.
    first = odd.next_inside(at("2026-10-25T00:00:00+00:00"))
    assert first == at("2026-10-25T02:30:00+02:00")
    gap = odd.next_outside(first)
    assert gap == at("2026-10-25T02:00:00+01:00")  # the clock went back from 03:00 CEST
    second = odd.next_inside(gap)
    assert second == at("2026-10-25T02:30:00+01:00")
    assert odd.next_outside(second) == at("2026-10-25T03:00:00+01:00")


def test_public_holidays_of_a_region() -> None:
    bavaria = parse_calendar("bank-holidays", [{"holidays": "DE", "subdivision": "BY"}], BERLIN)
    assert bavaria.contains(at("2026-01-06T12:00:00+01:00"))  # Epiphany: in Bavaria, not in Berlin
    berlin = parse_calendar("berlin", [{"holidays": "DE", "subdivision": "BE"}], BERLIN)
    assert not berlin.contains(at("2026-01-06T12:00:00+01:00"))
    assert bavaria.next_inside(at("2026-01-02T12:00:00+01:00")) == at("2026-01-06T00:00:00+01:00")
    assert bavaria.next_outside(at("2026-01-06T12:00:00+01:00")) == at("2026-01-07T00:00:00+01:00")
    us = parse_calendar("us", [{"holidays": "US"}], "America/New_York")
    assert us.contains(at("2026-07-03T12:00:00-04:00"))  # Independence Day (observed: 4 July is a Saturday)


def test_business_hours_as_an_allowed_window() -> None:
    hours = parse_calendar(
        "business-hours", [{"weekdays": ["mon", "tue", "wed", "thu", "fri"], "time": "09:00-17:00"}], BERLIN
    )
    friday_evening = at("2026-03-27T18:00:00+01:00")
    assert hours.next_inside(friday_evening) == at("2026-03-30T09:00:00+02:00")  # Monday, after the DST change


def test_rules_round_trip_through_their_description() -> None:
    rules = [
        {"weekdays": ["sat", "sun"], "time": "22:00-24:00"},
        {"dates": ["2026-12-24..2026-12-26", "2026-12-31"]},
        {"days_of_month": [1, 15]},
        {"holidays": "DE", "subdivision": "BY"},
    ]
    calendar = parse_calendar("c", rules, BERLIN)
    assert calendar.describe() == rules
    assert parse_calendar("c", calendar.describe(), BERLIN) == calendar


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ([], "non-empty list of rules"),
        ([{"time": "25:00-26:00"}], "HH:MM-HH:MM"),
        ([{"time": "10:00-10:00"}], "is empty"),
        ([{"dates": "2026-12-26..2026-12-24"}], "ends before it starts"),
        ([{"holidays": "XX"}], "no public holidays known for 'XX'"),
        ([{"holidays": "DE", "subdivision": "ZZ"}], "no public holidays known for 'DE'/'ZZ'"),
        ([{"weekdays": ["funday"]}], "'funday' is not a weekday"),
        ([{"days_of_month": [0]}], "days 1-31"),
        ([{"dates": "2026-02-01..2026-02-28", "days_of_month": [30]}], "never match"),
        ([{"minutes": 5}], "unknown condition 'minutes'"),
        ("[not json", "not JSON"),
    ],
)
def test_bad_rules_are_refused_naming_the_problem(rules: object, message: str) -> None:
    with pytest.raises(BadInput, match=message.replace("(", r"\(")):
        parse_calendar("c", rules, BERLIN)


def test_a_bad_time_zone_is_refused() -> None:
    with pytest.raises(BadInput, match="time zone 'Mars/Base' is not known"):
        parse_calendar("c", [{"weekdays": ["sat"]}], "Mars/Base")


def test_a_window_that_never_ends_has_no_next_outside() -> None:
    always = parse_calendar("always", [{"time": "00:00-24:00"}], "UTC")
    assert always.next_outside(at("2026-01-01T00:00:00+00:00")) is None
