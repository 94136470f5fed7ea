"""Column types that behave the same on every dialect.

`UTCDateTime` stores instants in UTC and always returns aware datetimes. On SQLite it is
fixed-width ISO text (``2026-11-30 04:00:00.000000``) so that text order is time order and
the claim index can range over it; a value written by something else that does not parse
reads back as None rather than breaking every read of the row. On MariaDB/MySQL it is a
naive DATETIME(6) holding UTC (their TIMESTAMP ends in 2038 and converts through the
session's time zone).

`Name` is bounded text compared exactly: on MariaDB/MySQL a binary utf8mb4 collation, as
their default collations would make 'Mail' and 'mail' one queue and one unique key.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Float, String, Unicode, UnicodeText
from sqlalchemy.dialects import mssql, mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

_SQLITE_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
# SQLAlchemy names a MariaDB dialect "mariadb" for mariadb:// URLs and "mysql" for mysql://.
MYSQL_NAMES = ("mysql", "mariadb")
_NAIVE_UTC = ("mssql", *MYSQL_NAMES)


class UTCDateTime(TypeDecorator[datetime]):
    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(26))
        if dialect.name == "mssql":
            return dialect.type_descriptor(mssql.DATETIME2(precision=6))  # type: ignore[no-untyped-call]
        if dialect.name in MYSQL_NAMES:
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("jobsup stores aware datetimes only")
        utc = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return utc.strftime(_SQLITE_FORMAT)
        if dialect.name in _NAIVE_UTC:
            return utc.replace(tzinfo=None)
        return utc

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                return None
        if not isinstance(value, datetime):
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def Name(length: int) -> TypeEngine[str]:
    """Unicode text of at most `length` characters, compared exactly on every dialect."""
    exact = mysql.VARCHAR(length, charset="utf8mb4", collation="utf8mb4_bin")
    return Unicode(length).with_variant(exact, *MYSQL_NAMES)


# Unbounded text: NVARCHAR(max) on SQL Server, whose UnicodeText default (NTEXT) is deprecated;
# LONGTEXT on MariaDB/MySQL, whose TEXT holds 64 KiB.
LongText = (
    UnicodeText()
    .with_variant(mssql.NVARCHAR(), "mssql")
    .with_variant(mysql.LONGTEXT(charset="utf8mb4", collation="utf8mb4_bin"), *MYSQL_NAMES)
)
# A number of seconds: MySQL's FLOAT is single precision (0.1 s would read back as 0.10000000149).
Seconds = Float().with_variant(mysql.DOUBLE(asdecimal=False), *MYSQL_NAMES)
