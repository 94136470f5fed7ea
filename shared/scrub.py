"""Keep secrets out of stored errors, `ctx.log` lines and the worker's log (DESIGN 1.7).

What is masked (``***``), in any letter case:

- the values of a job's sensitive parameters, as given and in the forms libraries quote
  them in: their repr and JSON, percent-encoded (``quote`` with and without ``/`` safe,
  ``quote_plus``), base64 (standard and URL-safe, with and without padding) and hex; and any
  run of 8 or more characters that begins or ends one of those (a truncated copy, such as
  pydantic's ``'sk_live_51HkQeRTYvX2...LmNoPqRsTuV'``);
- other payload strings of `LONG` characters or more, as exact copies (a second line of
  defence for a secret its job type does not mark sensitive);
- credential-shaped text whatever its source: the password of a URL
  (``scheme://user:***@host``), an ``Authorization:`` header's value, a ``Bearer`` token,
  and ``password=``, ``token=``, ``secret=``, ``api_key=`` assignments.

Payload keys, numbers and shorter strings are not masked: the payload is shown to the same
readers, and masking ``order`` and ``1234`` in "502 Bad Gateway for order 1234" costs the
diagnosis and hides nothing. Scrubbing is best-effort: a job must not put secrets in its
exception messages in a form none of the above recognises. Stored errors are capped at
2,000 characters.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "***"
ERROR_CAP = 2000
LONG = 12  # a non-sensitive string this long is masked as an exact copy
END = 8  # a run this long that begins or ends a sensitive value is masked (truncated copies)
_SHORT = END  # shorter texts are masked only where they stand as a whole word

# Credentials recognised by their shape, each with the group to keep before the mask.
# A scheme is at most 32 characters: unbounded, a long run of letters was quadratic (0.9 s
# of CPU for one 8 KiB log line). A longer glued run before it is kept in clear, the
# password still masked.
_CREDENTIALS = re.compile(
    r"(?P<keep>[a-z][a-z0-9+.\-]{0,31}://[^\s/:@'\"]*:)[^\s/@'\"]+(?=@)"  # a URL's password
    r"|(?P<keep2>\bauthorization\b['\"]?\s*[:=]\s*['\"]?(?:(?:bearer|basic|token|digest|negotiate)\s+)?)"
    r"[^\s'\",;]+"  # an Authorization header's value
    r"|(?P<keep3>\bbearer\s+)[a-z0-9\-._~+/]{8,}=*"  # a bearer token anywhere
    r"|(?P<keep4>\b(?:password|passwd|pwd|secret|token|api[_\-]?key|access[_\-]?key|client[_\-]?secret)"
    r"['\"]?\s*[:=]\s*['\"]?)[^\s'\"&,;)}\]]{4,}",  # key=value and "key": "value"
    re.IGNORECASE,
)


class Secrets:
    """What to mask in a job's texts (see the module docstring): `exact` anywhere (short
    ones as whole words), and any `END`-long start or end of `ends`.

    A worker makes them `deferred`: found only when a text needs them (a failure, a log
    line), since most jobs never fail or log and walking each payload for its long strings
    was 6 % of a short job's cost (py-spy of the peers' harness at batch 100)."""

    __slots__ = ("_ends", "_exact", "_find")

    def __init__(self, exact: tuple[str, ...] = (), ends: tuple[str, ...] = ()) -> None:
        self._exact, self._ends = exact, ends
        self._find: Callable[[], Secrets] | None = None

    @classmethod
    def deferred(cls, find: Callable[[], Secrets]) -> Secrets:
        """Secrets that `find()` gives when first asked for."""
        secrets = cls()
        secrets._find = find
        return secrets

    def _found(self) -> None:
        # No lock: threads that ask at once each find them; `_find` is cleared last, so a
        # thread that sees it cleared sees both fields set.
        find = self._find
        if find is not None:
            found = find()
            self._exact, self._ends = found.exact, found.ends
            self._find = None

    @property
    def exact(self) -> tuple[str, ...]:
        self._found()
        return self._exact

    @property
    def ends(self) -> tuple[str, ...]:
        self._found()
        return self._ends

    def __bool__(self) -> bool:
        return bool(self.exact or self.ends)


def secrets_of(payload: Any, sensitive: Iterable[str] = ()) -> Secrets:
    """The texts of `payload` to mask: every form of the values of its `sensitive`
    top-level fields, and its other strings of `LONG` characters or more."""
    exact: set[str] = set()
    ends: set[str] = set()
    secret = set(sensitive)
    if isinstance(payload, Mapping):
        for name in secret & payload.keys():
            forms = _forms(payload[name])
            exact.update(forms)
            ends.update(form for form in forms if len(form) > END)
        rest: Any = {key: item for key, item in payload.items() if key not in secret}
    else:
        rest = payload
    exact.update(_long_strings(rest))
    return Secrets(tuple(sorted(exact, key=len, reverse=True)), tuple(sorted(ends)))


def _forms(value: Any) -> set[str]:
    """A sensitive value and the encodings libraries quote it in."""
    if isinstance(value, str):
        texts = {value}
    elif isinstance(value, dict | list):  # each string inside, and the whole as JSON
        texts = set(_long_strings(value, shortest=1)) | {json.dumps(value, separators=(",", ":"))}
    elif value is None or isinstance(value, bool):
        return set()
    else:
        texts = {str(value)}
    forms: set[str] = set()
    for text in filter(None, texts):
        raw = text.encode()
        forms.update({text, repr(text), json.dumps(text), quote(text, safe=""), quote(text), quote_plus(text)})
        for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
            forms.update({encoded.decode(), encoded.decode().rstrip("=")})
        forms.add(binascii.hexlify(raw).decode())
    return {form for form in forms if form}


def _long_strings(value: Any, shortest: int = LONG) -> list[str]:
    found: list[str] = []

    def walk(item: Any) -> None:
        if isinstance(item, dict):
            for inner in item.values():
                walk(inner)
        elif isinstance(item, list):
            for inner in item:
                walk(inner)
        elif isinstance(item, str) and len(item) >= shortest:
            found.extend((item, repr(item), json.dumps(item)))

    walk(value)
    return found


def scrub(text: str, secrets: Secrets) -> str:
    # The payload's own texts first, so that a whole sensitive value ("Bearer abc...") is
    # masked as one rather than around a credential's name.
    if secrets.exact:
        text = _pattern(secrets.exact).sub(MASK, text)
    if secrets.ends:
        text = _mask_ends(text, secrets.ends)
    return _CREDENTIALS.sub(_keep_name, text)


def _keep_name(match: re.Match[str]) -> str:
    kept = next(group for group in match.groups() if group is not None)
    return kept + MASK


@functools.lru_cache(maxsize=64)
def _pattern(secrets: tuple[str, ...]) -> re.Pattern[str]:
    # One alternation, longest first, so that a secret inside a longer one is masked with it.
    parts = [
        re.escape(secret) if len(secret) >= _SHORT else rf"(?<![\w.]){re.escape(secret)}(?![\w.])" for secret in secrets
    ]
    return re.compile("|".join(parts), re.IGNORECASE)


def _mask_ends(text: str, forms: tuple[str, ...]) -> str:
    """`text` with every run of `END` or more characters that begins or ends one of `forms`
    masked: found by its first (last) `END` characters, then grown while it still matches."""
    folded = text.lower()
    if len(folded) != len(text):  # a letter whose lower case is longer: compare as written
        folded, forms = text, forms
    else:
        forms = tuple(form.lower() for form in forms)
    spans: list[tuple[int, int]] = []
    for form in forms:
        at = folded.find(form[:END])
        while at >= 0:
            end = at + END
            while end < len(folded) and end - at < len(form) and folded[end] == form[end - at]:
                end += 1
            spans.append((at, end))
            at = folded.find(form[:END], at + 1)
        at = folded.find(form[-END:])
        while at >= 0:
            start, end = at, at + END
            while start > 0 and end - start < len(form) and folded[start - 1] == form[-(end - start) - 1]:
                start -= 1
            spans.append((start, end))
            at = folded.find(form[-END:], at + 1)
    merged: list[list[int]] = []
    for start, end in sorted(_trimmed(text, span) for span in spans):
        if start == end:
            continue
        if merged and start <= merged[-1][1]:  # overlapping runs are masked as one
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out: list[str] = []
    last = 0
    for start, end in merged:
        out.extend((text[last:start], MASK))
        last = end
    out.append(text[last:])
    return "".join(out)


def _trimmed(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """A run without the spaces at its ends (a value's inner space is no secret alone)."""
    start, end = span
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def error_text(exc: BaseException, secrets: Secrets) -> str:
    """``Type: message`` with secrets masked, capped for storage."""
    message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    message = scrub(message, secrets)
    return message if len(message) <= ERROR_CAP else message[: ERROR_CAP - 3] + "..."


def validation_text(exc: BaseException) -> str | None:
    """A parameters-building error (pydantic's `ValidationError`) as its fields and
    reasons without the input values it quotes, or None when it says nothing structured."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return None
    try:
        found = errors(include_input=False, include_url=False)
        reasons = [
            f"field {'.'.join(str(part) for part in item.get('loc', ())) or '(payload)'!r}: {item['type']}"
            for item in found
        ]
    except Exception:  # another library's errors(): say nothing rather than guess
        return None
    return f"{type(exc).__name__}: {'; '.join(reasons)}" if reasons else None
