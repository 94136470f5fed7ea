"""Typed job parameters: `@jobsup.job("send-email", params=SendEmail)`.

`params` is a dataclass, a `typing.TypedDict`, a pydantic model (when pydantic is
installed; it is not a dependency), or a mapping of field names to types. `params_of` turns
it into a `Params`: the JSON Schema a definition publishes (so a process without the
workers' code checks payloads against it, see `jobsup.paramcheck`), the names of the
sensitive fields (sealed at rest, see `jobsup.secrets`), and how the worker builds the
typed object its function receives.

A type jobsup cannot carry as JSON is refused when the app is imported, naming the job and
the field, rather than at the first enqueue.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jobsup.errors import BadInput
from jobsup.paramcheck import check
from jobsup.payload import encode_payload
from jobsup.templates import KEY, Moment, Template, render


class Sensitive:
    """Marks a parameter as sensitive: ``token: Annotated[str, jobsup.Sensitive]``. Its value
    is stored encrypted and shown as ``***`` everywhere but in the worker that runs the job."""


@dataclass(frozen=True)
class Params:
    schema: dict[str, Any]  # JSON Schema of the payload, an object
    sensitive: frozenset[str]
    make: Callable[[dict[str, Any]], Any]  # the typed object from a checked payload
    templated: bool = False  # a default (here or in a nested object) is a template: see `jobsup.templates`

    def describe(self) -> dict[str, Any]:
        return self.schema


_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    Any: {},
    object: {},
    list: {"type": "array"},
    dict: {"type": "object"},
}


def params_of(spec: object, *, job: str, sensitive: Iterable[str] = ()) -> Params:
    """The `Params` of `spec`, or `BadInput` naming the job and the field that cannot be one."""
    fields, make = _fields(spec, job)
    named = set(sensitive) if not isinstance(sensitive, str) else {sensitive}
    unknown = named - {f.name for f in fields}
    if unknown:
        raise BadInput(
            f"job {job!r}: sensitive={sorted(unknown)} names no parameter; the parameters are {_names(fields)}"
        )
    properties, required = {}, []
    for f in fields:
        schema, marked = _schema(f.annotation, job, f.name, top=True)
        if marked or f.name in named:
            named.add(f.name)
            schema = {**schema, "writeOnly": True}  # JSON Schema's word for "sent, never shown"
        if f.description:
            schema["description"] = f.description
        if f.default is not _MISSING and f.name in named and f.default not in (None, ""):
            raise BadInput(
                f"job {job!r}: sensitive parameter {f.name!r} has a default, which would be published in "
                "clear with the job's definition; give it no default (or None)"
            )
        if isinstance(f.default, Template):
            schema[KEY] = _templated(f.default, schema, job, f.name)
        elif f.default is not _MISSING:
            schema["default"] = _default(f.default, job, f.name)
        elif f.required:
            required.append(f.name)
        properties[f.name] = schema
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return Params(schema, frozenset(named), make, _has_template(schema))


_MISSING = object()


@dataclass(frozen=True)
class _Field:
    name: str
    annotation: Any
    default: Any = _MISSING
    required: bool = True
    description: str | None = None


def _fields(spec: object, job: str) -> tuple[list[_Field], Callable[[dict[str, Any]], Any]]:
    if isinstance(spec, Mapping):
        fields = [_Field(_field_name(name, job), annotation) for name, annotation in spec.items()]
        # A field whose type allows None may be left out, as with an optional keyword.
        return [dataclasses.replace(f, required=not _allows_none(f.annotation)) for f in fields], dict
    if isinstance(spec, type) and dataclasses.is_dataclass(spec):
        return _dataclass_fields(spec, job), lambda payload: _build(spec, payload)
    if isinstance(spec, type) and typing.is_typeddict(spec):
        hints = _hints(spec, job)
        required = getattr(spec, "__required_keys__", frozenset(hints))
        fields = [_Field(name, hint, required=name in required and _required(hint)) for name, hint in hints.items()]
        return fields, dict
    if isinstance(spec, type) and hasattr(spec, "model_fields") and hasattr(spec, "model_validate"):
        return _pydantic_fields(spec), spec.model_validate
    raise BadInput(
        f"job {job!r}: params must be a dataclass, a TypedDict, a pydantic model or a mapping of "
        f"field names to types, not {spec!r}"
    )


def _dataclass_fields(spec: type, job: str) -> list[_Field]:
    hints = _hints(spec, job)
    found = []
    for f in dataclasses.fields(spec):
        if not f.init:
            continue  # set by the class itself, not a parameter
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        found.append(
            _Field(
                f.name,
                hints[f.name],
                _MISSING if default is dataclasses.MISSING else default,
                description=f.metadata.get("description"),
            )
        )
    return found


def _pydantic_fields(spec: type) -> list[_Field]:
    found = []
    for name, info in spec.model_fields.items():  # type: ignore[attr-defined]
        annotation = info.annotation
        if info.metadata:
            annotation = typing.Annotated[(annotation, *info.metadata)]
        default = _MISSING if info.is_required() else info.get_default(call_default_factory=True)
        found.append(_Field(name, annotation, default, description=info.description))
    return found


def _hints(spec: type, job: str) -> dict[str, Any]:
    try:
        return typing.get_type_hints(spec, include_extras=True)
    except Exception as exc:  # a forward reference nothing defines
        raise BadInput(f"job {job!r}: the types of {spec.__name__} cannot be read ({exc})") from None


def _field_name(name: object, job: str) -> str:
    if not isinstance(name, str) or not name:
        raise BadInput(f"job {job!r}: a parameter name is a non-empty string, not {name!r}")
    return name


def _schema(annotation: Any, job: str, where: str, *, top: bool = False) -> tuple[dict[str, Any], bool]:
    """The JSON Schema of `annotation`, and whether it was marked `Sensitive`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.NotRequired or origin is typing.Required:  # a TypedDict's, said by __required_keys__
        return _schema(args[0], job, where, top=top)
    if origin is typing.Annotated:
        marked = any(meta is Sensitive or isinstance(meta, Sensitive) for meta in annotation.__metadata__)
        if marked and not top:
            raise BadInput(
                f"job {job!r}: parameter {where!r} is marked Sensitive, but only top-level parameters can be"
            )
        schema, _ = _schema(args[0], job, where)
        return schema, marked
    if annotation in _SCALARS:
        return dict(_SCALARS[annotation]), False
    if origin in (list, tuple, set, frozenset) or origin is typing.Union or origin is types.UnionType:
        if origin is list:
            return {"type": "array", "items": _schema(args[0], job, f"{where}[]")[0]} if args else {
                "type": "array"
            }, False
        if origin in (tuple, set, frozenset):
            raise BadInput(f"job {job!r}: parameter {where!r} is a {origin.__name__}, which JSON cannot keep; use list")
        options = [_schema(arg, job, where, top=top) for arg in args]
        return {"anyOf": [schema for schema, _ in options]}, any(marked for _, marked in options)
    if origin is dict:
        if args and args[0] is not str:
            raise BadInput(f"job {job!r}: parameter {where!r} has keys of {args[0]!r}; JSON object keys are str")
        return {
            "type": "object",
            **({"additionalProperties": _schema(args[1], job, f"{where}{{}}")[0]} if args else {}),
        }, False
    if origin is typing.Literal:
        return {"enum": [_json_value(value, job, where) for value in args]}, False
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {
            "enum": [_json_value(member.value, job, where) for member in annotation],
            "title": annotation.__name__,
        }, False
    if isinstance(annotation, type) and (dataclasses.is_dataclass(annotation) or typing.is_typeddict(annotation)):
        nested = params_of(annotation, job=job)
        return {key: value for key, value in nested.schema.items()}, False
    raise BadInput(
        f"job {job!r}: parameter {where!r} has type {annotation!r}, which jobsup cannot carry as JSON; "
        "use str, int, float, bool, None, list[...], dict[str, ...], Literal, an Enum, a dataclass or a TypedDict"
    )


def _json_value(value: object, job: str, where: str) -> object:
    if not isinstance(value, str | int | float | bool | type(None)):
        raise BadInput(f"job {job!r}: parameter {where!r} allows {value!r}, which is not a JSON value")
    return value


def _default(value: object, job: str, name: str) -> object:
    if isinstance(value, enum.Enum):
        value = value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    try:
        encode_payload(value)
    except BadInput as exc:
        raise BadInput(f"job {job!r}: the default of {name!r} cannot be stored ({exc})") from None
    return value


def _templated(default: Template, schema: dict[str, Any], job: str, name: str) -> str:
    """A template default's text, once its field is known to take the string it renders."""
    try:
        sample = render(default.text, Moment.of(job, "queue"))
        check({"type": "object", "properties": {name: schema}}, {name: sample}, job=job)
    except BadInput:
        raise BadInput(
            f"job {job!r}: parameter {name!r} has a template default, which makes a string, but it takes "
            "something else; make its type str"
        ) from None
    return default.text


def _has_template(schema: object) -> bool:
    if isinstance(schema, dict):
        return KEY in schema or any(_has_template(value) for value in schema.values())
    if isinstance(schema, list):
        return any(_has_template(value) for value in schema)
    return False


def _required(hint: Any) -> bool:
    # Under postponed annotations a TypedDict cannot see NotRequired itself: the hint can.
    return typing.get_origin(hint) is not typing.NotRequired


def _allows_none(annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if annotation is type(None) or annotation is Any or annotation is None:
        return True
    origin = typing.get_origin(annotation)
    return (origin is typing.Union or origin is types.UnionType) and type(None) in typing.get_args(annotation)


def _names(fields: list[_Field]) -> list[str]:
    return [f.name for f in fields]


def _build(spec: type, payload: Mapping[str, Any]) -> Any:
    """A dataclass from a checked payload: nested dataclasses and enums rebuilt by their types."""
    values = {}
    for name, rebuild in _plan(spec):
        if name in payload:
            value = payload[name]
            values[name] = value if rebuild is None else rebuild(value)
    return spec(**values)


@functools.cache
def _plan(spec: type) -> tuple[tuple[str, Callable[[Any], Any] | None], ...]:
    """Per constructor field, how to rebuild its JSON value (None: as it is), worked out
    once per class rather than once per job."""
    hints = typing.get_type_hints(spec)
    return tuple((f.name, _rebuilder(hints[f.name])) for f in dataclasses.fields(spec) if f.init)


def _rebuilder(annotation: Any) -> Callable[[Any], Any] | None:
    if _needs_rebuild(annotation):
        return functools.partial(_typed, annotation)
    return None


def _needs_rebuild(annotation: Any) -> bool:
    if isinstance(annotation, type):
        return dataclasses.is_dataclass(annotation) or issubclass(annotation, enum.Enum)
    return any(_needs_rebuild(arg) for arg in typing.get_args(annotation))


def _typed(annotation: Any, value: Any) -> Any:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation) and isinstance(value, Mapping):
        return _build(annotation, value)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return annotation(value)
    if origin is list and args and isinstance(value, list):
        return [_typed(args[0], item) for item in value]
    if (origin is typing.Union or origin is types.UnionType) and value is not None:
        for arg in args:
            if arg is not type(None) and _fits(arg, value):
                return _typed(arg, value)
    return value


def _fits(annotation: Any, value: Any) -> bool:
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return isinstance(value, Mapping)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return value in {member.value for member in annotation}
    return True
