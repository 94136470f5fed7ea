"""Checking a payload against a job type's parameter schema (the JSON Schema `jobsup.params`
writes, which a definition publishes), with defaults filled in.

It runs where the job is enqueued, from the definition row alone, so a process that does
not import the workers' code refuses a bad payload before anything is written. It reads
only the part of JSON Schema that `jobsup.params` writes: type, properties, required,
additionalProperties, items, enum, anyOf, default, and jobsup's own
keyword for a template default (`jobsup.templates.KEY`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from jobsup.errors import BadInput, InvalidPayload
from jobsup.templates import KEY, Moment, render
from jobsup.templates import check as check_template

_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "string": (lambda v: isinstance(v, str), "a string"),
    "integer": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "number": (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    "boolean": (lambda v: isinstance(v, bool), "true or false"),
    "null": (lambda v: v is None, "null"),
    "array": (lambda v: isinstance(v, list), "a list"),
    "object": (lambda v: isinstance(v, dict), "an object"),
}


def check(
    schema: Mapping[str, Any], payload: Any, *, job: str, sealed_ok: bool = False, moment: Moment | None = None
) -> dict[str, Any]:
    """`payload` with its defaults filled in, or `InvalidPayload` naming the field, what it
    should be and what it is. No payload (None) is an empty object. With `sealed_ok`, a
    sealed value (`jobsup.secrets`) stands for any value of a sensitive field. Template
    defaults (`jobsup.templates`) are rendered from `moment`, the job being made; without
    one they are left out (a recurring schedule's payload, rendered at each fire)."""
    value = {} if payload is None else payload
    checked = _check(schema, value, "", _Where(job, sealed_ok, moment))
    assert isinstance(checked, dict)
    return checked


def problems(schema: Mapping[str, Any], payload: Any, *, job: str) -> list[str]:
    """Every top-level reason `payload` does not fit `schema` (not only the first), each
    without the job's name: for a deploy's report on the jobs already waiting."""
    prefix = f"payload of job {job!r}: "
    properties: Mapping[str, Any] = schema.get("properties", {})
    if not isinstance(payload, dict) or not properties:
        try:
            check(schema, payload, job=job, sealed_ok=True)
        except InvalidPayload as exc:
            return [str(exc).removeprefix(prefix)]
        return []
    found = []
    required = set(schema.get("required", ()))
    for key in {*properties, *payload}:
        if key not in properties and schema.get("additionalProperties") is False:
            found.append(
                f"field {key!r} is not a parameter of this job (its parameters: {', '.join(map(repr, properties))})"
            )
            continue
        alone = {
            **schema,
            "properties": {key: properties[key]} if key in properties else {},
            "required": [key] if key in required else [],
        }
        try:
            check(alone, {key: payload[key]} if key in payload else {}, job=job, sealed_ok=True)
        except InvalidPayload as exc:
            found.append(str(exc).removeprefix(prefix))
    return sorted(found)


def expected(schema: Mapping[str, Any]) -> str:
    """What `schema` allows, in words: ``a string``, ``an integer or null``, ``one of 'a', 'b'``."""
    if "enum" in schema:
        return "one of " + ", ".join(repr(value) for value in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(expected(option) for option in schema["anyOf"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(expected({"type": each}) for each in kind)
    if kind is None:
        return "any JSON value"
    if kind == "array" and "items" in schema:
        return f"a list of {_plural(expected(schema['items']))}"
    return _TYPES[kind][1] if isinstance(kind, str) and kind in _TYPES else f"a {kind}"


class _Where:
    def __init__(self, job: str, sealed_ok: bool, moment: Moment | None = None) -> None:
        self.job, self.sealed_ok, self.moment = job, sealed_ok, moment

    def fail(self, path: str, message: str) -> InvalidPayload:
        field = f"field {path!r}" if path else "the payload"
        return InvalidPayload(f"payload of job {self.job!r}: {field} {message}")


def _check(schema: Mapping[str, Any], value: Any, path: str, where: _Where) -> Any:
    if isinstance(schema.get("type"), list):  # JSON Schema's other spelling of a union
        schema = {**schema, "type": None, "anyOf": [{"type": kind} for kind in schema["type"]]}
    if "anyOf" in schema:
        failures = []
        for option in schema["anyOf"]:
            try:
                return _check(option, value, path, where)
            except InvalidPayload as exc:
                failures.append((option, exc))
        # One option of the value's own kind (an object for an optional dataclass): its
        # error says more (which field inside) than "must be an object or null".
        same_kind = [exc for option, exc in failures if _of_kind(option, value)]
        if len(same_kind) == 1:
            raise same_kind[0]
        raise where.fail(path, f"must be {expected(schema)}, not {_shown(value)}")
    if "enum" in schema:
        if not any(value == allowed and type(value) is type(allowed) for allowed in schema["enum"]):
            raise where.fail(path, f"must be {expected(schema)}, not {_shown(value)}")
        return value
    kind = schema.get("type")
    if kind is None:
        return value
    test, _ = _TYPES.get(kind, (lambda v: True, "")) if isinstance(kind, str) else (lambda v: True, "")
    if not test(value):
        raise where.fail(path, f"must be {expected(schema)}, not {_shown(value)}")
    if kind == "array" and "items" in schema:
        return [_check(schema["items"], item, f"{path}[{index}]", where) for index, item in enumerate(value)]
    if kind == "object":
        return _object(schema, value, path, where)
    return value


def _object(schema: Mapping[str, Any], value: dict[str, Any], path: str, where: _Where) -> dict[str, Any]:
    properties: Mapping[str, Any] = schema.get("properties", {})
    extras = schema.get("additionalProperties", True)
    checked: dict[str, Any] = {}
    for key in schema.get("required", ()):
        if key not in value:
            raise where.fail(_join(path, key), f"is required ({expected(properties.get(key, {}))}) and missing")
    for key, item in value.items():
        inner = properties.get(key)
        if inner is None:
            if extras is False:
                known = ", ".join(map(repr, properties)) or "none"
                raise where.fail(_join(path, key), f"is not a parameter of this job (its parameters: {known})")
            inner = extras if isinstance(extras, Mapping) else {}
        if where.sealed_ok and inner.get("writeOnly") and _is_sealed(item):
            checked[key] = item
            continue
        checked[key] = _check(inner, item, _join(path, key), where)
    for key, inner in properties.items():
        if key not in checked and "default" in inner:
            default = inner["default"]
            checked[key] = copy.deepcopy(default) if isinstance(default, list | dict) else default
        elif key not in checked and KEY in inner and where.moment is not None:
            checked[key] = _rendered(inner[KEY], where, _join(path, key))
    return checked


def _rendered(text: object, where: _Where, path: str) -> str:
    # The template comes from a definition row, which any process may have written: checked
    # again here, so a row cannot make this render anything but the fixed fields.
    assert where.moment is not None
    try:
        check_template(text)
    except BadInput as exc:
        raise where.fail(path, f"has a template default that cannot be used: {exc}") from None
    assert isinstance(text, str)
    return render(text, where.moment)


def _of_kind(schema: Mapping[str, Any], value: Any) -> bool:
    kind = _TYPES.get(schema.get("type", ""))
    return kind is not None and kind[0](value)


def _is_sealed(value: Any) -> bool:
    from jobsup.secrets import is_sealed

    return is_sealed(value)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _shown(value: Any) -> str:
    """What was given, by type only: a payload value may be a secret, and errors are shown."""
    for kind, (test, words) in _TYPES.items():
        if kind not in ("number",) and test(value):
            return words
    return type(value).__name__


def _plural(words: str) -> str:
    for article in ("an ", "a "):
        if words.startswith(article):
            return words[len(article) :] + "s"
    return words


def from_text(schema: Mapping[str, Any] | None, name: str, text: str, *, job: str) -> Any:
    """The value of ``--param name=text``, converted by the parameter's type in `schema`
    (an untyped job's is JSON when it parses as JSON, else the text itself)."""
    if schema is None:
        return _json_or_text(text)
    properties = schema.get("properties", {})
    if name not in properties:
        known = ", ".join(map(repr, properties)) or "none"
        raise InvalidPayload(f"job {job!r} has no parameter {name!r} (its parameters: {known})")
    converted = _converted(properties[name], text)
    if converted is _NO:
        shown = "***" if properties[name].get("writeOnly") else repr(text)
        raise InvalidPayload(f"--param {name}={shown}: job {job!r} takes {expected(properties[name])} there")
    return converted


_NO = object()
_BOOLEANS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _converted(schema: Mapping[str, Any], text: str) -> Any:
    options = schema.get("anyOf")
    if options is not None:
        # null first: "null" means no value wherever null is allowed.
        for option in sorted(options, key=lambda o: o.get("type") != "null"):
            value = _converted(option, text)
            if value is not _NO:
                return value
        return _NO
    if "enum" in schema:
        for allowed in schema["enum"]:
            if str(allowed) == text or (isinstance(allowed, bool) and _BOOLEANS.get(text.lower()) is allowed):
                return allowed
        return _NO
    kind = schema.get("type")
    try:
        if kind == "string":
            return text
        if kind == "integer":
            return int(text)
        if kind == "number":
            return float(text)
        if kind == "boolean":
            return _BOOLEANS.get(text.lower(), _NO)
        if kind == "null":
            return None if text.lower() in ("null", "none") else _NO
        value = _json_or_text(text)
        if kind is None or _TYPES[kind][0](value):
            return value
    except ValueError:
        pass
    return _NO


def _json_or_text(text: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text
