"""The checks of what callers pass in: names, free-text labels, limits, attempts,
priorities. Each returns the value or raises `BadInput` naming it; nothing of jobsup but its
errors is imported here, so every layer can use them."""

from __future__ import annotations

import functools
import re

from jobsup.errors import BadInput

# fullmatch, never `^...$` with match: `$` also matches before a final newline.
_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,200}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
INT32 = 2**31 - 1
INT64 = 2**63 - 1  # the largest id (BIGINT) every database stores


@functools.lru_cache(maxsize=1024)  # names repeat (a bulk enqueue checks its queue's per job)
def _is_name(value: str) -> bool:
    return _NAME.fullmatch(value) is not None


def check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or len(value) > 200 or not _is_name(value):  # no long text in the cache
        raise BadInput(f"{what} {value!r} is not valid: use 1-200 letters, digits and the characters _ . : -")
    return value


def check_text(value: object, what: str, *, longest: int = 200) -> str:
    """A free-text label (a unique key, an actor, a workflow key, a batch name, a reason):
    no control characters (a NUL no database stores alike, a newline that would forge a
    line of a listing)."""
    if not isinstance(value, str) or not 0 < len(value) <= longest:
        raise BadInput(f"{what} must be a string of 1-{longest} characters, not {value!r}")
    if _CONTROL.search(value):
        raise BadInput(f"{what} must not contain control characters (a newline, a tab, a NUL): {value!r}")
    return value


def check_limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadInput(f"limit must be a whole number of at least 1, not {value!r}")
    return value


def check_attempts(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT32:
        raise BadInput(f"max_attempts must be a whole number from 1 to {INT32}, not {value!r}")
    return value


def check_priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -INT32 <= value <= INT32:
        raise BadInput(f"priority must be an int between {-INT32} and {INT32}, not {value!r}")
    return value
