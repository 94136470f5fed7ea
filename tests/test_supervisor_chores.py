"""The supervisor's chores thread: the process table follows the live workers, whatever
the database lost meanwhile, and a fork on SQLite waits for other threads' database use."""

from __future__ import annotations

import threading

import pytest

import jobsup
from jobsup.store.database import Database
from jobsup.supervisor.chores import ProcessRows, Registration

from helpers import wait_until


def listed(client: jobsup.Client) -> set[str]:
    return {row.id for row in client.store.processes.process_list()}


def test_rows_that_were_pruned_or_never_written_come_back_and_dead_ones_go(url: str) -> None:
    client = jobsup.Client(url)
    rows = ProcessRows(client.store, "h:supervisor:1")
    one, two = Registration("h:default#1:a", 11, "default"), Registration("h:default#2:b", 12, "default")
    assert rows.sync([one, two], heartbeat=True)
    assert listed(client) == {"h:supervisor:1", one.id, two.id}

    # Another instance pruned everything while this host could not heartbeat.
    client.store.processes.process_deregister(sorted(listed(client)))
    assert rows.sync([one, two], heartbeat=True)
    assert listed(client) == {"h:supervisor:1", one.id, two.id}

    # Worker two died and a replacement was spawned: one change, one sync.
    three = Registration("h:default#2:c", 13, "default")
    assert rows.sync([one, three], heartbeat=False)
    assert listed(client) == {"h:supervisor:1", one.id, three.id}
    client.store.processes.process_deregister_all("h:supervisor:1")
    assert listed(client) == set()
    client.close()


def test_rows_closed_at_shutdown_are_never_written_again(url: str) -> None:
    """A sync that was still under way when the supervisor deregistered must not put its
    rows back (they would be listed as a live supervisor until another instance pruned them)."""
    client = jobsup.Client(url)
    rows = ProcessRows(client.store, "h:supervisor:2")
    assert rows.sync([Registration("h:default#1:a", 11, "default")], heartbeat=True)
    client.store.processes.process_deregister_all("h:supervisor:2")
    rows.closed.set()
    assert rows.sync([Registration("h:default#1:a", 11, "default"), Registration("h:mail#1:b", 12, "mail")], True)
    assert listed(client) == set()
    client.close()


def test_a_sync_under_way_when_the_rows_close_writes_nothing_after(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor stops while a sync is reading the table (its first statement): the
    rows it would then insert are not written."""
    client = jobsup.Client(url)
    rows = ProcessRows(client.store, "h:supervisor:3")
    read = client.store.processes.process_ids

    def read_while_stopping(supervisor_id: str) -> set[str]:
        present = read(supervisor_id)
        rows.closed.set()  # the supervisor stops and deregisters while this read is under way
        return present

    monkeypatch.setattr(client.store.processes, "process_ids", read_while_stopping)
    assert rows.sync([Registration("h:default#1:a", 11, "default")], heartbeat=False)
    assert listed(client) == set()
    client.close()


def test_a_fork_waits_for_a_database_use_under_way_on_sqlite(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    db.guard_forks()
    inside, leave, forked = threading.Event(), threading.Event(), threading.Event()

    def use() -> None:
        with db.read("read"):
            inside.set()
            leave.wait(10)

    def fork() -> None:
        with db.forking():
            forked.set()

    user = threading.Thread(target=use)
    user.start()
    inside.wait(10)
    forker = threading.Thread(target=fork)
    forker.start()
    assert not forked.wait(0.3), "the fork went ahead while another thread used the database"
    leave.set()
    wait_until(forked.is_set, timeout=10, what="the fork once the use ended")
    user.join(10)
    forker.join(10)
    db.dispose()
