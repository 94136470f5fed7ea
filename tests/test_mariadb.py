"""What only MariaDB/MySQL has: the URL schemes, the driver extra, the version gate, the
database clock, and the generated column that stands in for a partial unique index. (The
store's conformance tests run on MariaDB through the `url` fixture.)"""

from __future__ import annotations

import logging
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pymysql
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, OperationalError

import jobsup
from jobsup.errors import LockBusy
from jobsup.store.dialects import normalise_url
from jobsup.store.dialects.mariadb import MariaDBDialect, check_version


@pytest.mark.parametrize(
    ("given", "normalised"),
    [
        ("mariadb://u:p@db/app", "mariadb+pymysql"),
        ("mariadb+pymysql://u:p@db/app", "mariadb+pymysql"),
        ("mysql://u:p@db/app", "mysql+pymysql"),
        ("mysql+pymysql://u:p@db/app", "mysql+pymysql"),
    ],
)
def test_mariadb_and_mysql_schemes_use_pymysql(given: str, normalised: str) -> None:
    assert normalise_url(given).drivername == normalised


def test_a_missing_pymysql_names_the_mariadb_extra() -> None:
    code = (
        "import sys; sys.modules['pymysql'] = None\n"
        "import jobsup\n"
        "try:\n    jobsup.Client('mariadb://u:secret@db/app')\n"
        "except jobsup.ConfigurationError as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("DriverMissing mariadb needs the pymysql driver")
    assert "pip install 'jobsup[mariadb]'" in out
    assert "secret" not in out


@pytest.mark.parametrize("version", ["10.8.0-MariaDB", "10.11.19-MariaDB-0+deb12u1", "11.4.2-MariaDB"])
def test_mariadb_with_skip_locked_is_accepted(version: str) -> None:
    check_version(version)


@pytest.mark.parametrize(
    ("version", "named"),
    [
        ("10.5.23-MariaDB-1:10.5.23+maria~ubu2004", "MariaDB 10.5.23 is too old for jobsup"),
        ("5.5.5-10.3.39-MariaDB", "MariaDB 10.3.39 is too old for jobsup"),  # the old replication prefix
        ("10.6.17-MariaDB", "MariaDB 10.6.17 is too old for jobsup"),  # SKIP LOCKED, but DESC indexes read as ASC
    ],
)
def test_mariadb_without_skip_locked_is_refused_naming_the_version(version: str, named: str) -> None:
    with pytest.raises(jobsup.UnsupportedDatabase, match=named) as refused:
        check_version(version)
    assert str(refused.value).endswith("upgrade to MariaDB 10.8 or later")


@pytest.mark.parametrize(("version", "named"), [("8.0.0-dmr", "MySQL 8.0.0"), ("8.4.0", "MySQL 8.4.0")])
def test_mysql_is_refused_naming_the_version_and_the_reason(version: str, named: str) -> None:
    with pytest.raises(jobsup.UnsupportedDatabase, match=f"{named} is not supported") as refused:
        check_version(version)
    assert "needs MariaDB 10.8 or later" in str(refused.value)
    assert "left to right" in str(refused.value)


@pytest.mark.mariadb
def test_every_connection_assigns_simultaneously_and_strictly(mariadb_url: str) -> None:
    client = jobsup.Client(mariadb_url)
    for connections in (client.database.read, client.database.transaction):
        with connections() as conn:
            modes = conn.execute(text("SELECT @@SESSION.sql_mode")).scalar_one().split(",")
        assert {"SIMULTANEOUS_ASSIGNMENT", "STRICT_TRANS_TABLES"} <= set(modes)
    client.close()


@pytest.mark.mariadb
def test_the_clock_is_the_servers_utc_clock(mariadb_url: str) -> None:
    client = jobsup.Client(mariadb_url)
    db = client.database
    with db.read() as conn:
        server = db.dialect.instant(conn)
        # Whatever the session's time zone, the clock reads UTC.
        conn.execute(text("SET time_zone = '+05:00'"))
        shifted = db.dialect.instant(conn)
    assert server.tzinfo is not None
    assert abs(server - datetime.now(UTC)) < timedelta(minutes=5)  # this host and the server agree here
    assert abs(shifted - server) < timedelta(minutes=1)
    client.close()


@pytest.mark.mariadb
def test_a_finished_jobs_unique_key_leaves_the_generated_column(mariadb_url: str) -> None:
    client = jobsup.Client(mariadb_url)
    first = client.enqueue("works", unique_key="k1")
    with client.database.read() as conn:
        live = conn.execute(text("SELECT live_unique_key FROM jobsup_job WHERE id = :id"), {"id": first}).scalar()
        assert live == "k1"
        conn.execute(text("UPDATE jobsup_job SET status = 'succeeded' WHERE id = :id"), {"id": first})
        gone = conn.execute(text("SELECT live_unique_key FROM jobsup_job WHERE id = :id"), {"id": first}).scalar()
    assert gone is None
    assert client.enqueue("works", unique_key="k1") != first
    client.close()


@pytest.mark.mariadb
def test_the_gate_refuses_the_real_server_before_any_statement(
    mariadb_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The check runs on every new connection: pretend the minimum is above this server's."""
    from jobsup.store.dialects import mariadb

    monkeypatch.setattr(mariadb, "MINIMUM_MARIADB", (99, 0))
    client = jobsup.Client(mariadb_url)
    with (
        caplog.at_level(logging.DEBUG, logger="sqlalchemy.pool"),
        pytest.raises(jobsup.UnsupportedDatabase, match=r"MariaDB 1\d\.\d+\.\d+ is too old .* MariaDB 99\.0 or later"),
    ):
        client.list_jobs()
    # The refused connection is closed once, by the pool: no traceback besides the one line.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    client.close()


@pytest.mark.parametrize(
    ("number", "message"),
    [
        (1040, "Too many connections"),
        (1047, "WSREP has not yet prepared node for application use"),
        (1290, "The MariaDB server is running with the --read-only option so it cannot execute this statement"),
        (1836, "Running in read-only mode"),
    ],
)
def test_a_server_full_or_read_only_for_now_is_unavailable_not_a_refusal(number: int, message: str) -> None:
    """What a failover or a full server answers (the test cannot make the shared server
    read-only: every other test on it would fail); 1792, a read-only transaction, is also
    raised for real in test_hardening_store."""
    error = OperationalError("UPDATE jobsup_job ...", {}, pymysql.err.OperationalError(number, message))
    assert MariaDBDialect().classify(error) is jobsup.DatabaseBusy
    duplicate = IntegrityError("INSERT ...", {}, pymysql.err.IntegrityError(1062, "Duplicate entry"))
    assert MariaDBDialect().classify(duplicate) is jobsup.DatabaseError  # a refusal, not an outage
    lock_wait = OperationalError("UPDATE jobsup_job ...", {}, pymysql.err.OperationalError(1205, "Lock wait timeout"))
    assert MariaDBDialect().classify(lock_wait) is LockBusy  # a held row: tried again, not an outage
