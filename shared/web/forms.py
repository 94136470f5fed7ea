"""A typed job's parameters as an HTML form, and the form's answers as its payload.

The form is built from the JSON Schema the job type published (`jobsup.params`), so the
dashboard needs none of the workers' code: a string is a text box (a password box when the
parameter is sensitive, `writeOnly`), a number a number box, a boolean a checkbox, an enum
or a Literal a list to choose from, and anything else (a list, an object, a union) a box
for its JSON. An empty box leaves the parameter out, so its default (or its template)
applies and a missing required one is refused by the same check as any enqueue
(`jobsup.paramcheck`), whose message names it. Nothing here trusts the browser: the payload
is checked again against the schema when it is enqueued."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from jobsup.errors import BadInput
from jobsup.secrets import MASK
from jobsup.templates import KEY

PREFIX = "p."  # a parameter's field name in the form: apart from queue, priority and csrf

TEXT, NUMBER, INTEGER, CHECKBOX, CHOICE, JSON = "text", "number", "integer", "checkbox", "choice", "json"
# A JSON number, ASCII digits only (Python's int() and float() take "1_000" and other scripts' digits).
JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


@dataclass(frozen=True)
class Field:
    """One parameter's input: its `kind` (one of the constants above), whether it is
    required or sensitive (a password box, never filled in by the page), and what the page
    shows in it (`value`), as a hint (`placeholder`) or to choose from
    (`choices`: pairs of the option's JSON and its label)."""

    name: str
    kind: str
    required: bool
    sensitive: bool
    value: str = ""
    placeholder: str = ""
    description: str = ""
    choices: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return PREFIX + self.name


def fields_of(schema: dict[str, Any] | None) -> list[Field]:
    """The inputs of a typed job's schema (an object's properties, in their order)."""
    if not schema:
        return []
    required = set(schema.get("required", ()))
    return [_field(name, spec, name in required) for name, spec in schema.get("properties", {}).items()]


def _field(name: str, spec: dict[str, Any], required: bool) -> Field:
    inner = _without_null(spec)
    kind = _kind(inner)
    if kind == CHECKBOX and (inner is not spec or ("default" not in spec and not required)):
        # A checkbox cannot say "not given": an optional boolean is a list (default, true, false).
        kind, inner = CHOICE, {"enum": [True, False]}
    sensitive = bool(spec.get("writeOnly"))
    default = spec.get("default")
    placeholder = ""
    if KEY in spec:
        placeholder = f"template: {spec[KEY]}"
    elif kind == JSON:
        placeholder = "JSON"
    value = "" if sensitive or "default" not in spec else _shown(default, kind)
    choices = tuple(
        (json.dumps(option), json.dumps(option) if option is None or isinstance(option, bool) else str(option))
        for option in inner.get("enum", ())
    )
    return Field(
        name,
        kind,
        required,
        sensitive,
        value,
        placeholder,
        str(spec.get("description") or ""),
        choices,
    )


def _without_null(spec: dict[str, Any]) -> dict[str, Any]:
    """`Optional[X]` (``anyOf: [X, null]``) as X: its box left empty leaves it out."""
    options = spec.get("anyOf")
    if isinstance(options, list):
        rest = [option for option in options if option != {"type": "null"}]
        if len(rest) == 1 and len(rest) < len(options) and isinstance(rest[0], dict):
            return dict(rest[0])
    return spec


def _kind(spec: dict[str, Any]) -> str:
    if "enum" in spec:
        return CHOICE
    kinds = {"string": TEXT, "number": NUMBER, "integer": INTEGER, "boolean": CHECKBOX}
    return kinds.get(str(spec.get("type")), JSON)


def _shown(value: Any, kind: str) -> str:
    if kind == CHOICE:
        return json.dumps(value)
    if kind == CHECKBOX:
        return "true" if value else ""
    if kind == TEXT and isinstance(value, str):
        return value
    return json.dumps(value) if kind == JSON else ("" if value is None else str(value))


def payload_of(fields: list[Field], form: dict[str, list[str]]) -> dict[str, Any]:
    """The payload the form's answers make: each parameter by its field's kind; an empty
    box left out (a checkbox is always answered). A value that is not of its kind is
    refused here with the parameter's name; the rest is the schema check's."""
    payload: dict[str, Any] = {}
    for field in fields:
        raw = (form.get(field.key) or [""])[0]
        if field.kind == CHECKBOX:
            payload[field.name] = raw == "true"
            continue
        if raw == "" or (raw.strip() == "" and field.kind != TEXT):
            continue  # left out: its default or template applies, or the check names it missing
        payload[field.name] = _read(field, raw)
    return payload


def _read(field: Field, raw: str) -> Any:
    if field.kind == TEXT:
        return raw
    if field.kind in (INTEGER, NUMBER):
        text = raw.strip()
        if not JSON_NUMBER.fullmatch(text):
            raise BadInput(f"field {field.name!r}: {_quoted(field, raw)} is not a number")
        number = float(text)
        if number.is_integer() and abs(number) < 2**53:
            return int(number)  # JSON Schema's integer: 3 and 3.0 alike
        if field.kind == INTEGER:
            raise BadInput(f"field {field.name!r}: {_quoted(field, raw)} is not a whole number")
        return number
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        what = "one of the listed values" if field.kind == CHOICE else 'JSON (a list is [1, 2], an object {"a": 1})'
        raise BadInput(f"field {field.name!r}: {_quoted(field, raw)} is not {what}") from None


def _quoted(field: Field, raw: str) -> str:
    return "the value given" if field.sensitive else repr(raw[:60])


def untyped_payload(form: dict[str, list[str]]) -> Any:
    """An untyped job's payload: the JSON in the form's one payload box (empty: null)."""
    raw = (form.get("payload") or [""])[0]
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise BadInput(f'the payload is not JSON ({exc.args[0]}); an object is {{"to": "a@example.com"}}') from None


def kept(fields: list[Field], form: dict[str, list[str]]) -> dict[str, str]:
    """What a refused form shows again, so nothing typed is lost: every box's answer but
    the sensitive ones' (a page never holds a secret in clear); a checkbox as it was left."""
    secret = {field.key for field in fields if field.sensitive}
    shown = {key: values[0] for key, values in form.items() if values and key not in secret and key != "csrf"}
    for field in fields:
        if field.kind == CHECKBOX:
            shown[field.key] = "true" if shown.get(field.key) == "true" else ""  # unticked: not sent
    return shown


def masked(payload: object) -> set[str]:
    """The keys of a payload read back masked (``***``): sensitive values, never shown."""
    return {key for key, value in payload.items() if value == MASK} if isinstance(payload, dict) else set()


def without_secrets(text: str, sensitive: frozenset[str]) -> tuple[str, list[str]]:
    """A payload's JSON as a page may show it again: without the values of `sensitive`
    keys or masked ones (``***``), and the keys left out. JSON that cannot be read is not
    shown again when the job type has sensitive parameters: it may hold one."""
    try:
        payload = json.loads(text) if text.strip() else None
    except (ValueError, RecursionError):
        return ("", sorted(sensitive)) if sensitive else (text, [])
    if not isinstance(payload, dict):
        return text, []
    hidden = sorted(masked(payload) | (sensitive & payload.keys()))
    if not hidden:
        return text, []
    return json.dumps({key: value for key, value in payload.items() if key not in hidden}, indent=2), hidden
