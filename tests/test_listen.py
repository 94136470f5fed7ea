"""PostgreSQL wakeups: an enqueue wakes the idle workers of its queue only, and the LISTEN
connection has the same timeouts as every other connection, so a dead one is noticed and
replaced. (The hardening issue's items 22 and 23.)"""

from __future__ import annotations

import select
import socket
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

import jobsup
from jobsup.store.database import Database
from jobsup.store.dialects.postgresql import CONNECT_ARGS, NotifyListener

from harness import Supervisor
from helpers import wait_until

pytestmark = pytest.mark.postgres


def readable(listener: NotifyListener, timeout: float) -> bool:
    ready, _, _ = select.select([listener.fileno()], [], [], timeout)
    if ready:
        listener.drain()
    return bool(ready)


def test_an_enqueue_wakes_only_the_workers_of_its_queue(postgres_url: str) -> None:
    client = jobsup.Client(postgres_url)
    mail, reports = NotifyListener(client.database, "mail"), NotifyListener(client.database, "reports")
    try:
        client.enqueue("a", queue="mail")
        assert readable(mail, 5.0), "the mail worker was not woken"
        assert not readable(reports, 0.5), "a worker of another queue was woken"
        client.enqueue("a", queue="reports")
        assert readable(reports, 5.0)
    finally:
        mail.close()
        reports.close()


def test_a_queue_name_too_long_for_a_channel_still_wakes_its_workers(postgres_url: str) -> None:
    client = jobsup.Client(postgres_url)
    queue = "q" * 120  # longer than PostgreSQL's 63-byte channel names
    listener = NotifyListener(client.database, queue)
    try:
        client.enqueue("a", queue=queue)
        assert readable(listener, 5.0)
    finally:
        listener.close()


def test_the_listen_connection_has_the_timeouts_of_every_connection(postgres_url: str) -> None:
    listener = NotifyListener(Database(postgres_url), "default")
    try:
        parameters = listener.conn.info.get_parameters()
    finally:
        listener.close()
    for name, value in CONNECT_ARGS.items():
        assert parameters.get(name) == str(value), (name, parameters)


@pytest.mark.slow
def test_listen_gives_up_on_a_server_that_never_answers() -> None:
    """A server that accepts and then says nothing: the connect timeout ends the wait."""
    silent = socket.create_server(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True).start()
    outcome: list[BaseException] = []

    def listen() -> None:
        try:
            NotifyListener(Database(f"postgresql://app@127.0.0.1:{port}/app"), "default")
        except BaseException as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=listen, daemon=True)
    waiting.start()
    waiting.join(CONNECT_ARGS["connect_timeout"] + 15)
    silent.close()
    assert not waiting.is_alive(), "LISTEN kept waiting past its connect timeout"
    assert outcome and isinstance(outcome[0], jobsup.DatabaseUnavailable), outcome


@pytest.mark.slow
def test_a_lost_listen_connection_is_replaced(postgres_url: str, record: Path, tmp_path: Path) -> None:
    supervisor = Supervisor(postgres_url, record, tmp_path / "supervisor.log", poll_interval="1s")
    db = Database(postgres_url)
    listening = text("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'")
    try:
        with db.read() as conn:
            [first] = wait_until(lambda: conn.execute(listening).scalars().all(), timeout=30, what="a LISTEN")
        with db.read() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
        with db.read() as conn:
            again = wait_until(
                lambda: [pid for pid in conn.execute(listening).scalars().all() if pid != first],
                timeout=30,
                what="a new LISTEN connection",
            )
        assert again
        assert "operation=listen" in supervisor.output()
    finally:
        supervisor.stop()
        db.dispose()
