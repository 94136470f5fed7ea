"""Bad input gets a clear JobsupError naming the problem, and nothing is written."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

import jobsup
from jobsup.durations import parse_duration
from jobsup.payload import encode_payload
from jobsup.settings import load
from jobsup.store.schema import SCHEMA_REVISION, job

from helpers import run_jobsup


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"when": datetime(2030, 1, 1)}, r"payload\['when'\] is a datetime"),
        ({"items": [1, 2, {3, 4}]}, r"payload\['items'\]\[2\] is a set \(use a list\)"),
        ((1, 2), r"payload is a tuple \(use a list\)"),
        ({1: "a"}, r"payload has a key of type int"),
        ([float("nan")], r"payload\[0\] is nan, which JSON cannot hold"),
        (object(), r"payload is a object; jobs take JSON values"),
    ],
)
def test_payloads_that_are_not_json_are_refused_with_their_path(payload: object, message: str) -> None:
    with pytest.raises(jobsup.InvalidPayload, match=message):
        encode_payload(payload)


def test_subclasses_of_json_types_are_payloads_as_before_the_fast_look() -> None:
    # `_plain` takes exact types only; anything else goes through the walk that names paths.
    import collections
    import enum

    class Level(enum.IntEnum):
        HIGH = 2

    class Tag(str):
        pass

    payload = {"level": Level.HIGH, "tag": Tag("x"), "more": collections.OrderedDict(a=[True, None, 1.5])}
    assert encode_payload(payload) == '{"level":2,"tag":"x","more":{"a":[true,null,1.5]}}'
    with pytest.raises(jobsup.InvalidPayload, match=r"payload\['more'\]\['a'\]\[1\] is inf"):
        encode_payload({"more": collections.OrderedDict(a=[1, float("inf")])})


def test_a_payload_nested_hundreds_deep_is_encoded_as_before_the_fast_look() -> None:
    deep: object = 1
    for _ in range(400):
        deep = [{"a": deep}]
    assert encode_payload(deep).startswith('[{"a":[{"a":')


def test_a_payload_over_the_cap_is_refused_and_one_at_it_is_not() -> None:
    from jobsup.payload import PAYLOAD_CAP

    at_cap = "x" * (PAYLOAD_CAP - 2)  # its two quotes make it PAYLOAD_CAP characters
    assert len(encode_payload(at_cap)) == PAYLOAD_CAP
    with pytest.raises(jobsup.InvalidPayload, match="over the cap of 1,048,576: store large data elsewhere"):
        encode_payload(at_cap + "x")


def test_json_payloads_round_trip() -> None:
    assert encode_payload({"a": [1, 2.5, None, True, "é"]}) == '{"a":[1,2.5,null,true,"é"]}'


def test_the_encoder_made_once_writes_what_json_dumps_writes() -> None:
    # A plain payload (and a job's result) is written by the C encoder made once
    # (`payload._encode_plain`), not by json.dumps: the same text, byte for byte.
    import enum
    import json

    from jobsup import payload as payloads

    assert payloads._encode_plain is not payloads._encode, "CPython has the C encoder: the fast path is in use"

    class Level(enum.IntEnum):
        HIGH = 2

    values = [
        {},
        [],
        "",
        {"a": [1, 2.5, None, True, False, "é", "\u2028", "\x00", 'q"\\']},
        {"big": 2**70, "neg": -1, "small": 1e-300, "exp": 1e300, "zero": -0.0},
        [[[{"k": {"n": [1]}}]]],
        {"level": Level.HIGH, "tuple": (1, 2)},  # not plain: the public encoder, same text
        {1: "int key"},  # json.dumps's own conversion of the key, kept
    ]
    for value in values:
        expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        assert payloads.to_json(value) == expected
        if payloads._plain(value):
            assert encode_payload(value) == expected
    for bad, error in ((float("nan"), ValueError), (object(), TypeError)):
        with pytest.raises(error):
            payloads.to_json(bad)
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        payloads.to_json(cycle)


@pytest.mark.parametrize(
    ("text", "seconds"), [("250ms", 0.25), ("10s", 10), ("5m", 300), ("1h", 3600), ("2", 2), (1.5, 1.5)]
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(timedelta(minutes=2)) == 120


@pytest.mark.parametrize("bad", ["10 parsecs", "-5s", "", True, None, float("inf")])
def test_bad_durations_name_the_setting(bad: object) -> None:
    with pytest.raises(jobsup.InvalidDuration, match="timeout"):
        parse_duration(bad, what="timeout")


def test_bad_enqueue_arguments_write_nothing(sqlite_url: str) -> None:
    client = jobsup.Client(sqlite_url)
    cases = [
        ({"payload": {"x": b"bytes"}}, jobsup.InvalidPayload, r"payload\['x'\] is a bytes"),
        ({"run_at": datetime(2030, 1, 1)}, jobsup.BadInput, "naive datetime"),
        ({"run_at": "tomorrow"}, jobsup.BadInput, "run_at must be a datetime"),
        ({"delay": "soon"}, jobsup.InvalidDuration, "delay"),
        ({"delay": "1s", "run_at": datetime.now().astimezone()}, jobsup.BadInput, "not both"),
        ({"max_attempts": 0}, jobsup.BadInput, "max_attempts"),
        ({"queue": "no spaces"}, jobsup.BadInput, "queue 'no spaces' is not valid"),
        ({"priority": "high"}, jobsup.BadInput, "priority must be an int"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            client.enqueue("a", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(jobsup.BadInput, match="job name"):
        client.enqueue("")
    with client.database.read() as conn:
        assert conn.execute(select(func.count()).select_from(job)).scalar_one() == 0


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("oracle://scott@127.0.0.1/app", "unsupported database URL scheme 'oracle'; use sqlite"),
        ("mysql+mysqldb://root@127.0.0.1/app", "driver 'mysqldb' is not supported for mysql"),
        ("postgresql+psycopg2://x@h/db", "driver 'psycopg2' is not supported for postgresql"),
        ("not a url", "is not a database URL"),
    ],
)
def test_unsupported_urls_list_the_supported_ones(url: str, message: str) -> None:
    with pytest.raises(jobsup.UnsupportedDatabase, match=message):
        jobsup.Client(url)


def test_a_missing_driver_names_the_extra_to_install() -> None:
    code = (
        "import sys; sys.modules['pyodbc'] = None\n"
        "import jobsup\n"
        "try:\n    jobsup.Client('mssql+pyodbc://u:p@dsn')\n"
        "except jobsup.ConfigurationError as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("DriverMissing mssql needs the pyodbc driver")
    assert "pip install 'jobsup[mssql]'" in out


def test_bare_postgresql_scheme_uses_psycopg() -> None:
    client = jobsup.Client("postgresql://postgres@127.0.0.1:5432/postgres")
    assert client.database.url.drivername == "postgresql+psycopg"


def test_unreachable_database_names_host_and_port_and_hides_the_password() -> None:
    client = jobsup.Client("postgresql://app:s3cret@127.0.0.1:1/app")
    with pytest.raises(jobsup.DatabaseUnavailable) as caught:
        client.enqueue("a")
    message = str(caught.value)
    assert "host 127.0.0.1, port 1" in message
    assert "s3cret" not in message and "***" in message


def test_cli_unreachable_database_exits_1_with_one_line() -> None:
    result = run_jobsup("db", "upgrade", "--database-url", "postgresql://app:s3cret@127.0.0.1:1/app")
    assert result.returncode == 1
    assert result.stderr.startswith("jobsup: cannot reach the database")
    assert "s3cret" not in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_bad_url_exits_2_with_one_line() -> None:
    result = run_jobsup("db", "upgrade", "--database-url", "oracle://x@y/z")
    assert result.returncode == 2
    assert "unsupported database URL scheme 'oracle'" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_upgrade_creates_the_schema_and_prints_offline_sql(tmp_path: Path) -> None:
    result = run_jobsup("db", "upgrade", cwd=tmp_path)  # the default URL: sqlite:///jobsup.db
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "jobsup.db").exists()
    assert f"revision {SCHEMA_REVISION}" in result.stdout
    offline = run_jobsup("db", "upgrade", "--sql", "--dialect", "postgresql", cwd=tmp_path)
    assert offline.returncode == 0 and "CREATE TABLE jobsup_job" in offline.stdout


def test_settings_sources_later_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "jobsup.toml").write_text('database_url = "sqlite:///from-file.db"\nlease = "10m"\n')
    assert load(directory=tmp_path).database_url == "sqlite:///from-file.db"
    assert load(directory=tmp_path).lease == 600
    monkeypatch.setenv("JOBSUP_DATABASE_URL", "sqlite:///from-env.db")
    assert load(directory=tmp_path).database_url == "sqlite:///from-env.db"
    assert load({"database_url": "sqlite:///flag.db"}, directory=tmp_path).database_url == "sqlite:///flag.db"


def test_a_queue_runs_several_jobs_at_once_by_flag_or_file(tmp_path: Path) -> None:
    queues = load({"queues": ["mail=2:50", "default"]}, directory=tmp_path).queues
    assert (queues["mail"].workers, queues["mail"].concurrency, queues["default"].concurrency) == (2, 50, 1)
    (tmp_path / "jobsup.toml").write_text("[queues]\nmail = { workers = 3, concurrency = 20 }\n")
    assert load(directory=tmp_path).concurrency_of("mail") == 20


def test_bad_settings_are_named(tmp_path: Path) -> None:
    (tmp_path / "jobsup.toml").write_text('lease = "forever"\n')
    with pytest.raises(jobsup.InvalidDuration, match="lease"):
        load(directory=tmp_path)
    (tmp_path / "jobsup.toml").write_text('leas = "5m"\n')
    with pytest.raises(jobsup.ConfigurationError, match="unknown setting 'leas'"):
        load(directory=tmp_path)
    (tmp_path / "jobsup.toml").write_text("lease = [\n")
    with pytest.raises(jobsup.ConfigurationError, match="not valid TOML"):
        load(directory=tmp_path)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("queues = 3", "queues: 3 is not a list of queues"),
        ("queues = []", "queues: none given"),
        ('queues = ["=2"]', "has no queue name"),
        ("apps = 5", "apps: 5 is not a list of module names"),
        ('migrate = "sometimes"', "migrate: 'sometimes' is neither true nor false"),
        ('poll_interval = "0s"', "would claim in a busy loop"),
        ('queues = ["mail=2:0"]', "concurrency of queue 'mail' must be 1-1000"),
        ('queues = ["mail=2:lots"]', "concurrency of queue 'mail': 'lots' is not a whole number"),
        ("queues = { mail = { workers = 1, threads = 5 } }", "use workers, concurrency, claim_batch, timeout"),
    ],
)
def test_settings_of_the_wrong_shape_are_named(tmp_path: Path, toml: str, message: str) -> None:
    (tmp_path / "jobsup.toml").write_text(toml + "\n")
    with pytest.raises(jobsup.ConfigurationError, match=message):
        load(directory=tmp_path)


def test_environment_settings_are_read_strictly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBSUP_MIGRATE", "off")
    assert load(directory=tmp_path).migrate is False
    monkeypatch.setenv("JOBSUP_MIGRATE", "n")
    with pytest.raises(jobsup.ConfigurationError, match="neither true nor false"):
        load(directory=tmp_path)
    monkeypatch.setenv("JOBSUP_MIGRATE", "")  # an env file's empty line: not set
    assert load(directory=tmp_path).migrate is True
    monkeypatch.setenv("JOBSUP_QUEUES", " ")
    assert list(load(directory=tmp_path).queues) == ["default"]
    monkeypatch.setenv("JOBSUP_QUEUES", ",")
    with pytest.raises(jobsup.ConfigurationError, match="queues: none given"):
        load(directory=tmp_path)


def test_retry_and_discard_are_jobsup_errors() -> None:
    assert jobsup.Retry(after="10s").after == 10
    assert jobsup.Retry().after is None
    assert isinstance(jobsup.Discard("bad"), jobsup.JobsupError)
    with pytest.raises(jobsup.InvalidDuration):
        jobsup.Retry(after="later")
