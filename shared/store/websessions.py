"""Dashboard login sessions (`jobsup_web_session`): a row per live session, so that logging
out ends a session on the server, in every dashboard process on the database, and not only
in the browser that logged out.

The cookie stays signed and self-describing (`jobsup.web.auth`); the row only says the
session has not ended. Rows hold the SHA-256 of the session id, never the id itself, and
expire on the database's clock; each new session deletes the expired ones.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from sqlalchemy import Select, delete, insert, literal_column, select

from jobsup.store.database import Database
from jobsup.store.schema import web_session


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class WebSessions:
    def __init__(self, db: Database) -> None:
        self.db, self.dialect = db, db.dialect

    def web_session_open(self, session_id: str, user: str, seconds: float, *, now: datetime | None = None) -> None:
        """Record a session of `user` that lasts `seconds`."""
        clock = self.dialect.clock_params(now, p_ttl=seconds)
        with self.db.transaction("sessions") as conn:
            conn.execute(delete(web_session).where(web_session.c.expires_at <= self.dialect.clock()), clock)
            conn.execute(
                insert(web_session).values(
                    id=_key(session_id), user_name=user[:200], expires_at=self.dialect.clock("p_ttl")
                ),
                clock,
            )

    def web_session_live(self, session_id: str, *, now: datetime | None = None) -> bool:
        """Whether the session has neither ended nor expired."""
        query: Select[Any] = select(literal_column("1")).where(
            web_session.c.id == _key(session_id), web_session.c.expires_at > self.dialect.clock()
        )
        with self.db.read("sessions") as conn:
            return conn.execute(query, self.dialect.clock_params(now)).first() is not None

    def web_session_end(self, session_id: str) -> bool:
        """End the session (logout); False if it had ended already."""
        with self.db.statement("sessions") as conn:
            return bool(conn.execute(delete(web_session).where(web_session.c.id == _key(session_id))).rowcount)
