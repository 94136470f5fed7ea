"""Keep payload values out of stored errors and logs (DESIGN 1.7).

Every string and number in the payload that is long enough to be recognisable is replaced
by ``***`` wherever it appears in the text, as is the payload's own JSON and repr. Stored
errors are then capped at 2,000 characters.
"""

from __future__ import annotations

import json
from typing import Any

MASK = "***"
ERROR_CAP = 2000


def secrets_of(payload: Any) -> list[str]:
    """The texts a payload could leak, longest first (so a value inside another goes second)."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and len(value) >= 3:
            found.update({value, repr(value), json.dumps(value)})
        elif isinstance(value, int | float) and not isinstance(value, bool) and len(str(value)) >= 4:
            found.add(str(value))

    walk(payload)
    if payload is not None and not isinstance(payload, bool):
        found.update({repr(payload), json.dumps(payload, default=str)})
    return sorted(found, key=len, reverse=True)


def scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def error_text(exc: BaseException, secrets: list[str]) -> str:
    """``Type: message`` with payload values masked, capped for storage."""
    message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    message = scrub(message, secrets)
    return message if len(message) <= ERROR_CAP else message[: ERROR_CAP - 3] + "..."
