"""Keep payload contents out of stored errors and logs (DESIGN 1.7).

Every string and number in the payload, and every key of its objects, is replaced by ``***``
wherever it appears in the text, in any letter case (``Bearer ABC`` hides ``bearer abc``):
texts of three characters or more wherever they occur, shorter ones (``42``, ``7``, ``ab``)
only where they stand as a whole word, so that masking ``7`` does not mangle ``1976``. The
payload's own JSON and repr are masked too. Stored errors are capped at 2,000 characters.
"""

from __future__ import annotations

import json
import re
from typing import Any

MASK = "***"
ERROR_CAP = 2000
_SHORT = 3


def secrets_of(payload: Any) -> list[str]:
    """The texts a payload could leak, longest first (so a value inside another goes second)."""
    found: set[str] = set()

    def text(value: str) -> None:
        if value:
            found.update({value, repr(value), json.dumps(value)})

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                text(str(key))
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            text(value)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            found.add(str(value))

    walk(payload)
    if payload is not None and not isinstance(payload, bool):
        found.update({repr(payload), json.dumps(payload, default=str)})
    return sorted(found, key=len, reverse=True)


def scrub(text: str, secrets: list[str]) -> str:
    if not secrets:
        return text
    return _pattern(tuple(secrets)).sub(MASK, text)


def _pattern(secrets: tuple[str, ...]) -> re.Pattern[str]:
    # One alternation, longest first, so that a secret inside a longer one is masked with it.
    parts = [
        re.escape(secret) if len(secret) >= _SHORT else rf"(?<![\w.]){re.escape(secret)}(?![\w.])" for secret in secrets
    ]
    return re.compile("|".join(parts), re.IGNORECASE)


def error_text(exc: BaseException, secrets: list[str]) -> str:
    """``Type: message`` with payload contents masked, capped for storage."""
    message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    message = scrub(message, secrets)
    return message if len(message) <= ERROR_CAP else message[: ERROR_CAP - 3] + "..."
