"""The `listen_url` setting: its sources, and what it refuses (one line, no password)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobsup.errors import ConfigurationError
from jobsup.settings import Settings, load
from jobsup.store.database import Database

from helpers import run_jobsup

SERVER = "postgresql://jobs@10.0.0.5:5432/jobs"


def test_listen_url_comes_from_file_environment_and_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().listen_url == ""
    (tmp_path / "jobsup.toml").write_text(f'listen_url = "{SERVER}"\n')
    assert load(directory=tmp_path).listen_url == SERVER
    (tmp_path / "jobsup.toml").write_text("listen_url = false\n")
    assert load(directory=tmp_path).listen_url == "off"
    monkeypatch.setenv("JOBSUP_LISTEN_URL", "OFF")
    assert load(directory=tmp_path).listen_url == "off"
    assert load({"listen_url": SERVER}, directory=tmp_path).listen_url == SERVER


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("mysql://jobs:hunter2@db/jobs", "listen_url 'mysql://jobs:***@db/jobs' is not a PostgreSQL URL"),
        ("sqlite:///jobsup.db", "listen_url 'sqlite:///jobsup.db' is not a PostgreSQL URL"),
        ("postgresql://jobs:hunter2@db:port/jobs", "listen_url 'postgresql://jobs:***@db:port/jobs' is not a URL"),
        ("nowhere", "listen_url 'nowhere' is not a URL"),
        ("postgresql+asyncpg://jobs:hunter2@db/jobs", "driver 'asyncpg' is not supported"),
    ],
)
def test_a_bad_listen_url_is_refused_without_its_password(value: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Settings().merged({"listen_url": value})
    assert message in str(refused.value)
    assert "hunter2" not in str(refused.value)


def test_listen_url_on_a_database_without_listen_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"the database sqlite.* is not PostgreSQL"):
        Database(f"sqlite:///{tmp_path / 'jobsup.db'}", listen_url=SERVER)


def test_listen_url_off_is_accepted_on_a_database_without_listen(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'jobsup.db'}", listen_url="off")
    assert db.listen_url == "off"
    db.dispose()


def test_start_refuses_listen_url_on_sqlite_in_one_line(tmp_path: Path) -> None:
    result = run_jobsup("start", "--listen-url", "postgresql://jobs:hunter2@db/jobs", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "listen_url is set, but the database sqlite+pysqlite:///jobsup.db is not PostgreSQL" in result.stderr
    assert "remove listen_url" in result.stderr
    assert "Traceback" not in result.stderr and "hunter2" not in result.stderr
    assert not (tmp_path / "jobsup.db").exists()
