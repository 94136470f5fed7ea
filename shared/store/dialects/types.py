"""Column types that behave the same on every dialect.

`UTCDateTime` stores instants in UTC and always returns aware datetimes. On SQLite it is
fixed-width ISO text (``2026-11-30 04:00:00.000000``) so that text order is time order and
the claim index can range over it; a value written by something else that does not parse
reads back as None rather than breaking every read of the row.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, String, UnicodeText
from sqlalchemy.dialects import mssql
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

_SQLITE_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


class UTCDateTime(TypeDecorator[datetime]):
    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(26))
        if dialect.name == "mssql":
            return dialect.type_descriptor(mssql.DATETIME2(precision=6))  # type: ignore[no-untyped-call]
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("jobsup stores aware datetimes only")
        utc = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return utc.strftime(_SQLITE_FORMAT)
        if dialect.name == "mssql":
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


# Unbounded text: NVARCHAR(max) on SQL Server, whose UnicodeText default (NTEXT) is deprecated.
LongText = UnicodeText().with_variant(mssql.NVARCHAR(), "mssql")
