"""Durations as users write them: ``250ms``, ``10s``, ``5m``, ``1h``, or plain seconds."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from jobsup.errors import InvalidDuration

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")


MAX_SECONDS = 100 * 365 * 86400.0  # so that now +/- a duration is always a datetime


def parse_duration(value: object, *, what: str = "duration") -> float:
    """Return `value` in seconds; raise `InvalidDuration` naming `what` when it is not one.

    Accepts a number of seconds (int, float or numeric string), a string with a unit
    (``ms``, ``s``, ``m``, ``h``, ``d``) or a `timedelta`. Negative and non-finite values
    are refused.
    """
    seconds: float
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise InvalidDuration(f"{what}: {value!r} is not a duration; write e.g. 10s, 5m or 1h")
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _PATTERN.fullmatch(value)):
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise InvalidDuration(f"{what}: {value!r} is not a duration; write e.g. 250ms, 10s, 5m or 1h")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidDuration(f"{what}: {value!r} must be a finite, non-negative duration")
    if seconds > MAX_SECONDS:
        raise InvalidDuration(f"{what}: {value!r} is longer than 100 years, more than any clock here counts")
    return seconds
