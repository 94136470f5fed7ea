"""The JSON API's frame: each operation is declared once, with its method, path, role,
parameters, body and response schemas; the same declaration builds the Starlette route,
checks the input and writes the OpenAPI document (`jobsup.web.openapi`). Errors are one
JSON shape, ``{"error": {"status": ..., "message": ...}}``, never a traceback."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from jobsup.checks import INT64
from jobsup.errors import BadInput, DatabaseError, DuplicateJob, JobNotFound, JobsupError
from jobsup.web.auth import OPERATOR, READ, Identity

MAX_BODY = 256 * 1024  # bytes of a request body
log = logging.getLogger("jobsup.web")


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class Param:
    """A query or path parameter: `kind` is ``string``, ``integer`` or ``boolean``."""

    name: str
    kind: str = "string"
    where: str = "query"
    description: str = ""
    enum: tuple[str, ...] | None = None
    minimum: int | None = None
    maximum: int | None = None

    def schema(self) -> dict[str, Any]:
        found: dict[str, Any] = {"type": self.kind}
        if self.enum:
            found["enum"] = list(self.enum)
        if self.kind == "integer":
            found["minimum"] = -INT64 if self.minimum is None else self.minimum
            found["maximum"] = INT64 if self.maximum is None else self.maximum
        elif self.kind == "string":
            found["maxLength"] = 200
        return found

    def parse(self, raw: str) -> Any:
        if self.kind == "integer":
            try:
                value = int(raw)
            except ValueError:
                raise ApiError(400, f"{self.name}: {raw[:50]!r} is not a whole number") from None
            low = -INT64 if self.minimum is None else self.minimum
            high = INT64 if self.maximum is None else self.maximum
            if not low <= value <= high:
                raise ApiError(400, f"{self.name}: {value} is not between {low} and {high}")
            return value
        if self.kind == "boolean":
            if raw not in ("true", "false"):
                raise ApiError(400, f"{self.name}: {raw[:50]!r} is neither true nor false")
            return raw == "true"
        if len(raw) > 200:
            raise ApiError(400, f"{self.name}: longer than 200 characters")
        if self.enum and raw not in self.enum:
            raise ApiError(400, f"{self.name}: {raw[:50]!r} is not one of {', '.join(self.enum)}")
        return raw


Handler = Callable[..., Any]
H = TypeVar("H", bound=Handler)


@dataclass(frozen=True)
class Operation:
    method: str
    path: str  # under /api/v1, with {name} path parameters
    summary: str
    handler: Handler
    response: dict[str, Any]
    role: str = READ
    params: tuple[Param, ...] = ()
    body: dict[str, Any] | None = None
    status: int = 200
    tag: str = "jobs"
    errors: tuple[int, ...] = field(default=(400,))

    @property
    def operation_id(self) -> str:
        return self.handler.__name__


class Operations:
    """The operations one API module declares (`api_jobs`, `api_ops`), each module its own;
    `app.OPERATIONS` lists the modules the app serves."""

    def __init__(self) -> None:
        self.all: list[Operation] = []

    def add(self, method: str, path: str, summary: str, response: dict[str, Any], **options: Any) -> Callable[[H], H]:
        def register(handler: H) -> H:
            self.all.append(Operation(method, path, summary, handler, response, **options))
            return handler

        return register


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status)


async def read_json(request: Request) -> Any:
    """The body as JSON, at most `MAX_BODY` bytes (413 past it), an object (400 otherwise)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not (declared.isascii() and declared.isdigit()) or int(declared) > MAX_BODY):
        raise ApiError(413, f"request body larger than {MAX_BODY} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise ApiError(413, f"request body larger than {MAX_BODY} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deep
        raise ApiError(400, "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


def endpoint(
    op: Operation,
    identify: Callable[[Request], Awaitable[Identity]],
    check_csrf: Callable[[Request, Identity, str | None], None],
) -> Callable[[Request], Awaitable[Any]]:
    """The Starlette endpoint of `op`: who is asking (`identify`), may they (its role, and
    `check_csrf` for a cookie session), the parsed input, the call (in a thread: the client
    is synchronous), and errors as JSON."""

    async def run(request: Request) -> Any:
        try:
            who = await identify(request)
            check_csrf(request, who, None)
            if op.role == OPERATOR and not who.may_act:
                raise ApiError(403, "this action needs the operator role")
            kwargs: dict[str, Any] = {}
            for param in op.params:
                source = request.path_params if param.where == "path" else request.query_params
                if param.name in source:
                    kwargs[param.name] = param.parse(str(source[param.name]))
            unknown = set(request.query_params) - {p.name for p in op.params if p.where == "query"}
            if unknown:
                raise ApiError(400, f"unknown query parameter(s): {', '.join(sorted(unknown))[:200]}")
            if op.body is not None:
                kwargs["body"] = check_body(op.body, await read_json(request))
            result = await run_in_threadpool(op.handler, request.app.state.client, who, **kwargs)
            return JSONResponse(plain(result), status_code=op.status)
        except ApiError as exc:
            return error_response(exc.status, exc.message)
        except Exception as exc:
            return translate(exc)

    return run


def plain(value: Any) -> Any:
    """JSON-ready: datetimes as ISO 8601 text, tuples as lists."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def translate(exc: Exception) -> JSONResponse:
    """A jobsup error as the status it means; anything else a 500 without details."""
    if isinstance(exc, JobNotFound):
        return error_response(404, str(exc))
    if isinstance(exc, DuplicateJob):
        return error_response(409, str(exc))
    if isinstance(exc, BadInput):
        return error_response(400, str(exc))
    if isinstance(exc, DatabaseError):
        log.warning("database error in the web API: %s", exc)
        return error_response(503, "the database is not available")
    if isinstance(exc, JobsupError):
        return error_response(400, str(exc))
    log.exception("unexpected error in the web API")
    return error_response(500, "internal error (logged)")


def check_body(schema: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The top level of `body` against `schema`: required fields, known fields, their types."""
    properties: dict[str, Any] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in body:
            raise ApiError(400, f"body: {name!r} is required")
    for name, value in body.items():
        if name not in properties:
            raise ApiError(400, f"body: {name[:50]!r} is not a known field ({', '.join(properties)})")
        if not _fits(properties[name], value):
            raise ApiError(400, f"body: {name!r} is not {_describe(properties[name])}")
    return body


_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def _fits(schema: dict[str, Any], value: Any) -> bool:
    kinds = schema.get("type")
    if kinds is None:
        return True
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if not any(_TYPES[kind](value) for kind in kinds):
        return False
    if isinstance(value, str) and len(value) > schema.get("maxLength", MAX_BODY):
        return False
    if isinstance(value, int) and not isinstance(value, bool):
        return bool(schema.get("minimum", -INT64) <= value <= schema.get("maximum", INT64))
    if isinstance(value, list) and "items" in schema:
        return len(value) <= schema.get("maxItems", MAX_BODY) and all(_fits(schema["items"], v) for v in value)
    return True


def _describe(schema: dict[str, Any]) -> str:
    kinds = schema.get("type")
    return " or ".join([kinds] if isinstance(kinds, str) else kinds or ["valid"])
