"""The OpenAPI 3.1 document, written from the operations' declarations (`jobsup.web.api`)."""

from __future__ import annotations

from typing import Any

from jobsup.web import schemas as s
from jobsup.web.api import Operation
from jobsup.web.auth import OPERATOR

PREFIX = "/api/v1"
REASONS = {
    400: "Bad input (the message names it)",
    401: "Not authenticated",
    403: "Not allowed: the operator role is needed, or the CSRF token is missing",
    404: "Not found",
    409: "Refused by the job's state (a live job holds its unique key)",
    413: "Request body too large",
}


def document(operations: list[Operation], version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(PREFIX + op.path, {})[op.method.lower()] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "jobsup",
            "version": version,
            "description": "Durable background jobs: the operator's HTTP API. State-changing calls "
            "need the operator role, and a bearer token (or, with cookie or basic auth, the "
            "X-CSRF-Token header).",
        },
        "servers": [{"url": "/"}],
        "components": {
            "schemas": {"Error": s.ERROR},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "basic": {"type": "http", "scheme": "basic"},
            },
        },
        "security": [{"bearer": []}, {"basic": []}],
        "paths": paths,
    }


def _operation(op: Operation) -> dict[str, Any]:
    errors = {*op.errors, 401, 403} if op.role == OPERATOR else {*op.errors, 401}
    if op.body is not None:
        errors.add(413)
    responses: dict[str, Any] = {
        str(op.status): {"description": "OK", "content": {"application/json": {"schema": op.response}}}
    }
    for status in sorted(errors):
        responses[str(status)] = {
            "description": REASONS[status],
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
    found: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "tags": [op.tag],
        "responses": responses,
    }
    if op.params:
        found["parameters"] = [
            {
                "name": p.name,
                "in": p.where,
                "required": p.where == "path",
                "description": p.description or p.name,
                "schema": p.schema(),
            }
            for p in op.params
        ]
    if op.body is not None:
        found["requestBody"] = {"required": False, "content": {"application/json": {"schema": op.body}}}
    return found
