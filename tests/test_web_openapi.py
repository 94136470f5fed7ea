"""The OpenAPI document is generated from the code, and schemathesis holds the API to it:
every operation, with generated input, never answers 500 and always in the documented shape."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import jobsup
from jobsup.store import migrate
from jobsup.store.database import Database
from jobsup.web import asgi_app
from jobsup.web.app import OPERATIONS

from webhelpers import OPERATOR, READER, TOKENS, web

CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance, content_type_conformance]


# The schema is loaded when the module is collected, so the app is built then, on a database
# file that the fixture below migrates before the first case runs (each xdist worker its own).
FOLDER = Path(tempfile.mkdtemp(prefix="jobsup-openapi-"))
URL = f"sqlite:///{FOLDER / 'api.db'}"
CLIENT = jobsup.Client(URL)
schema = schemathesis.openapi.from_asgi(
    "/api/v1/openapi.json", asgi_app(client=CLIENT, tokens=TOKENS, users=""), headers=READER
)


@pytest.fixture(scope="module", autouse=True)
def database() -> Iterator[None]:
    migrate.upgrade(Database(URL))
    for n in range(3):  # something to list, retry and cancel
        CLIENT.enqueue("work", {"n": n})
    yield
    CLIENT.close()
    shutil.rmtree(FOLDER, ignore_errors=True)


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_keeps_to_its_schema(case: Any) -> None:
    case.call_and_validate(headers=OPERATOR, checks=CHECKS)


def test_the_document_is_openapi_3_1_and_lists_every_declared_operation(sqlite_url: str) -> None:
    with web(sqlite_url) as http:
        assert http.get("/api/v1/openapi.json").status_code == 401  # authenticated, as every request
        spec = http.get("/api/v1/openapi.json", headers=READER).json()
    assert spec["openapi"] == "3.1.0"
    listed = {(method.upper(), path) for path, ops in spec["paths"].items() for method in ops}
    assert listed == {(op.method, "/api/v1" + op.path) for op in OPERATIONS}
    assert len(listed) >= 28
    ids = [op["operationId"] for ops in spec["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
