"""jobsup's pytest plugin (registered as ``pytest11`` when jobsup is installed): the
``jobsup_client`` fixture, a `jobsup.Client` on a fresh, migrated SQLite database of its
own for each test. The schema is made once per test session and copied."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from jobsup.client import Client


@pytest.fixture(scope="session")
def _jobsup_schema(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from jobsup.store.database import Database
    from jobsup.store.migrate import upgrade

    path = tmp_path_factory.mktemp("jobsup") / "schema.db"
    database = Database(f"sqlite:///{path}")
    try:
        upgrade(database)
    finally:
        database.dispose()
    return path


@pytest.fixture
def jobsup_client(_jobsup_schema: Path, tmp_path: Path) -> Iterator[Client]:
    """A `jobsup.Client` on an empty, migrated SQLite database in the test's temporary
    folder (``jobsup.db``), closed after the test."""
    from jobsup.client import Client

    path = tmp_path / "jobsup.db"
    shutil.copyfile(_jobsup_schema, path)
    client = Client(f"sqlite:///{path}")
    try:
        yield client
    finally:
        client.close()
