"""Payload encoding: JSON only, checked before anything is written.

A payload that JSON would silently change (a tuple, an int dict key) or cannot hold (a
datetime, a set, NaN) is refused with the offending type and its path in the payload,
e.g. ``payload['items'][2] is a datetime``; so is one over `PAYLOAD_CAP`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from jobsup.errors import InvalidPayload

_SCALARS = (str, int, bool, type(None))
# One encoder for every payload: json.dumps with options builds a new one per call.
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def _plain_encoder() -> Callable[[Any], str]:
    """The same JSON as `_encode`, for a value `_plain` passed, from the C encoder made once:
    `JSONEncoder.encode` makes a new one at every call, 3 us of a no-op job's 4 in a bulk
    enqueue. Without the circular check, which a value `_plain` finished cannot need (a
    cycle never finishes its look). Where the interpreter has no C encoder (or it changed
    shape), `_encode` itself."""
    make = getattr(json.encoder, "c_make_encoder", None)
    basestring = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or basestring is None:
        return _encode
    try:
        encoder = make(None, None, basestring, None, ":", ",", False, False, False)
        if "".join(encoder({"a": [1, 2.5, None, True, "é"]}, 0)) != '{"a":[1,2.5,null,true,"é"]}':
            return _encode
    except Exception:  # any change of the private signature: the public path
        return _encode
    join = "".join
    return lambda value: join(encoder(value, 0))


_encode_plain = _plain_encoder()


# Characters of JSON one payload may take: a job row is read whole by every claim of it.
PAYLOAD_CAP = 1024 * 1024


def encode_payload(payload: Any) -> str:
    """Return `payload` as compact JSON text, or raise `InvalidPayload` naming where it fails."""
    if _looks_plain(payload):
        text = _encode_plain(payload)
    else:
        _check(payload, "payload")  # raises, naming where (or passes a subclass the look skipped)
        text = _encode(payload)
    check_length(len(text))
    return text


def to_json(value: Any) -> str:
    """`value` as the same compact JSON, with json's own errors (`TypeError`, `ValueError`,
    `RecursionError`) rather than `InvalidPayload`, and no cap: a job's result."""
    return _encode_plain(value) if _looks_plain(value) else _encode(value)


def _looks_plain(value: Any) -> bool:
    """`_plain`, and False for a value nested deeper than its look goes (the walk, or the
    public encoder, decides)."""
    try:
        return _plain(value)
    except RecursionError:
        return False


def check_length(length: int) -> None:
    """`InvalidPayload` for a payload of `length` characters of JSON over `PAYLOAD_CAP`."""
    if length > PAYLOAD_CAP:
        raise InvalidPayload(
            f"payload is {length:,} characters of JSON, over the cap of {PAYLOAD_CAP:,}: "
            "store large data elsewhere (a file, a table) and pass a reference to it"
        )


def decode_payload(text: str) -> Any:
    """Decode a stored payload; a corrupt one raises `InvalidPayload` (the attempt then fails)."""
    # The decoder's own scanner, for a text that is one JSON value end to end (every payload
    # jobsup writes): json.loads looks for whitespace around it with a regex first, 0.7 µs of
    # an empty payload's 0.15 here. Anything else goes to json.loads, which says what is
    # wrong (or takes the whitespace, or bytes a row written by other code may hold).
    if type(text) is str:
        try:
            value, end = _scan(text, 0)
            if end == len(text):
                return value
        except StopIteration:  # not a JSON value at the start: json.loads says why
            pass
        except (ValueError, RecursionError) as exc:
            raise InvalidPayload(f"stored payload is not valid JSON ({exc.__class__.__name__})") from None
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidPayload(f"stored payload is not valid JSON ({exc.__class__.__name__})") from None


# json.loads's decoder as configured by default; its scanner is set by its __init__ (not in the stubs).
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _plain(value: Any) -> bool:
    """Is `value` made of exactly the types JSON holds as they are (no subclass, a finite
    float)? The look every enqueue takes: `_check`'s walk names where a payload fails, but
    builds a path for every value it passes (a third of a bulk enqueue's own CPU), so it
    runs only when this one says no."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is dict:  # loops, not all(): one frame a level, as deep as `_check` goes
        for key, item in value.items():  # noqa: SIM110 (all() takes two frames more a level)
            if type(key) is not str or not _plain(item):
                return False
        return True
    if kind is list:
        for item in value:  # noqa: SIM110
            if not _plain(item):
                return False
        return True
    return False


def _check(value: Any, path: str) -> None:
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidPayload(f"{path} is {value!r}, which JSON cannot hold")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidPayload(
                    f"{path} has a key of type {type(key).__name__} ({key!r}); JSON object keys must be str"
                )
            _check(item, f"{path}[{key!r}]")
        return
    hint = " (use a list)" if isinstance(value, tuple | set | frozenset) else ""
    raise InvalidPayload(
        f"{path} is a {type(value).__name__}{hint}; jobs take JSON values: "
        "str, int, float, bool, None, list, and dict with str keys"
    )
