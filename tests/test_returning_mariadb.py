"""The emulated UPDATE ... RETURNING (`jobsup.store.dialects.returning`) on the real MariaDB
at 127.0.0.1:3306, on a table of the tests' own: the new values of the rows it changed, and
a compare-and-set under competing transactions and processes.

The tests fail (never skip) when MariaDB is unreachable, unless JOBSUP_TEST_MARIADB=skip
says to leave them out; each session gets a database of its own, dropped at the end.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import (
    Column,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    bindparam,
    create_engine,
    func,
    insert,
    select,
    update,
)

from jobsup.errors import DatabaseError
from jobsup.store.dialects.returning import LockedReturning

from helpers import (
    create_mariadb_database,
    drop_mariadb_database,
    mariadb_database_url,
    mariadb_lock_waits,
    run_together,
    wait_until,
)

pytestmark = pytest.mark.mariadb


metadata = MetaData()
rows = Table(
    "returning_rows",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("state", String(20), nullable=False),
    Column("owner", String(40)),
    Column("version", Integer, nullable=False),
)
other = Table("returning_other", metadata, Column("id", Integer, primary_key=True), Column("flag", Integer))


@pytest.fixture(scope="session")
def own_database(mariadb_server: str) -> Iterator[str]:
    """A database of this module's own (its tables are not jobsup's)."""
    name = f"jobsup_test_returning_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    create_mariadb_database(name)
    yield mariadb_database_url(name)
    drop_mariadb_database(name)


@pytest.fixture
def engine(own_database: str) -> Iterator[Engine]:
    """The session's database with fresh tables: rows 1..`ROWS` free, at version 0."""
    made = create_engine(own_database)
    metadata.drop_all(made)
    metadata.create_all(made)
    with made.begin() as conn:
        conn.execute(insert(rows), [{"id": i, "state": "free", "version": 0} for i in range(1, ROWS + 1)])
    yield made
    made.dispose()


ROWS = 120

# The compare-and-set of the tests: a free row is taken by `p_owner`, once.
take = LockedReturning.of(
    update(rows)
    .where(rows.c.id.in_(bindparam("p_ids", expanding=True)), rows.c.state == "free")
    .values(state="taken", owner=bindparam("p_owner"), version=rows.c.version + 1)
    .returning(rows.c.id, rows.c.owner, rows.c.version, rows.c.state)
)


def table_of(engine: Engine) -> dict[int, tuple[str, str | None, int]]:
    with engine.connect() as conn:
        return {r.id: (r.state, r.owner, r.version) for r in conn.execute(select(rows))}


def test_it_returns_the_new_values_of_the_rows_it_changed_in_key_order(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(update(rows).where(rows.c.id == 3).values(state="gone"))
        changed = take.run(conn, {"p_ids": [5, 3, 1, 2], "p_owner": "a"})
    assert [tuple(r) for r in changed] == [(1, "a", 1, "taken"), (2, "a", 1, "taken"), (5, "a", 1, "taken")]
    with engine.begin() as conn:
        assert take.run(conn, {"p_ids": [1, 2, 3, 5], "p_owner": "b"}) == []  # nothing matches: nothing changes
    table = table_of(engine)
    assert [table[i] for i in (1, 2, 3, 4, 5)] == [
        ("taken", "a", 1),
        ("taken", "a", 1),
        ("gone", None, 0),
        ("free", None, 0),
        ("taken", "a", 1),
    ]


def test_a_row_another_transaction_changed_first_is_judged_on_its_new_values(engine: Engine) -> None:
    """B's locking read waits for A's transaction, then sees the row A left (taken): B does
    not match it, does not change it, and does not report it."""
    waiting, results = threading.Event(), {}

    def second() -> None:
        with engine.begin() as conn:
            waiting.set()
            results["b"] = take.run(conn, {"p_ids": [7], "p_owner": "b"})

    with engine.begin() as conn:
        results["a"] = take.run(conn, {"p_ids": [7], "p_owner": "a"})
        thread = threading.Thread(target=second)
        thread.start()
        wait_until(waiting.is_set, timeout=30, what="the second transaction to start")
        wait_until(lambda: lock_waits(engine) >= 1, timeout=30, what="the second transaction to wait for the row lock")
    thread.join(timeout=60)
    assert [tuple(r) for r in results["a"]] == [(7, "a", 1, "taken")]
    assert results["b"] == []
    assert table_of(engine)[7] == ("taken", "a", 1)


def lock_waits(engine: Engine) -> int:
    with engine.connect() as conn:
        return mariadb_lock_waits(conn)


def compete(url: str, owner: str, batch: int, start: Any, out: Any) -> None:
    """One competing process: try to take every row, `batch` ids a statement, in an order of
    its own; send back the rows it was told it took."""
    engine = create_engine(url)
    ids = list(range(1, ROWS + 1))
    random.Random(owner).shuffle(ids)
    taken: list[tuple[int, str, int]] = []
    start.wait()
    try:
        for i in range(0, len(ids), batch):
            with engine.begin() as conn:
                changed = take.run(conn, {"p_ids": ids[i : i + batch], "p_owner": owner})
                taken.extend((r.id, r.owner, r.version) for r in changed)
    except Exception as exc:
        out.put((owner, f"{type(exc).__name__}: {exc}"))  # the parent fails at once, saying why
        raise
    finally:
        engine.dispose()
    out.put((owner, taken))


@pytest.mark.slow
def test_competing_processes_never_both_take_a_row(engine: Engine, own_database: str) -> None:
    """Four processes, two taking one row a statement and two seven, each in its own order."""
    context = multiprocessing.get_context("spawn")
    owners = {"p0": 1, "p1": 7, "p2": 1, "p3": 7}
    start, out = context.Barrier(len(owners)), context.Queue()
    processes = [
        context.Process(target=compete, args=(own_database, owner, batch, start, out))
        for owner, batch in owners.items()
    ]
    for process in processes:
        process.start()
    reports = dict(out.get(timeout=120) for _ in owners)
    for process in processes:
        process.join(timeout=30)
    assert not [report for report in reports.values() if isinstance(report, str)]
    assert [process.exitcode for process in processes] == [0] * len(owners)
    told = [row for taken in reports.values() for row in taken]
    assert sorted(row[0] for row in told) == list(range(1, ROWS + 1))  # each row reported taken exactly once
    assert all(row[2] == 1 for row in told)  # and changed exactly once
    table = table_of(engine)
    for owner, taken in reports.items():
        assert all(table[row_id] == ("taken", owner, 1) and who == owner for row_id, who, _ in taken)


def test_threads_counting_by_compare_and_set_lose_no_increment(engine: Engine) -> None:
    """Each thread reads a row's version and bumps it only if unchanged: the successes the
    emulation reports are exactly the increments made."""
    bump = LockedReturning.of(
        update(rows)
        .where(rows.c.id == 1, rows.c.version == bindparam("p_seen"))
        .values(version=rows.c.version + 1)
        .returning(rows.c.version)
    )
    won: list[int] = []

    def bumper() -> None:
        for _ in range(25):
            with engine.begin() as conn:
                seen = conn.execute(select(rows.c.version).where(rows.c.id == 1)).scalar_one()
                won.extend(r.version for r in bump.run(conn, {"p_seen": seen}))

    run_together([threading.Thread(target=bumper) for _ in range(4)])
    final = table_of(engine)[1][2]
    assert final == len(won) > 0
    assert sorted(won) == list(range(1, final + 1))  # each new version reported once


def test_a_where_on_the_updated_table_itself_runs_on_mariadb(engine: Engine) -> None:
    """MariaDB (unlike MySQL) lets an UPDATE's WHERE read the updated table."""
    newest = rows.alias("newest")
    last_free = select(func.max(newest.c.id)).where(newest.c.state == "free").scalar_subquery()
    stmt = update(rows).where(rows.c.id == last_free).values(state="taken").returning(rows.c.id)
    with engine.begin() as conn:
        assert [r.id for r in LockedReturning.of(stmt).run(conn, {})] == [ROWS]


@pytest.mark.parametrize(
    ("stmt", "reason"),
    [
        (update(rows).values(state="x").returning(rows.c.id), "needs a WHERE"),
        (update(rows).where(rows.c.id == other.c.id).values(state="x").returning(rows.c.id), "one table"),
        (update(rows).where(rows.c.id == 1).values(state="x").returning(other.c.flag), "one table"),
    ],
)
def test_what_it_cannot_emulate_is_refused_when_prepared(stmt: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        LockedReturning.of(stmt)


def test_fewer_rows_changed_than_locked_is_an_error_not_a_guess(engine: Engine) -> None:
    """A WHERE that reads another table's rows, changed between the lock and the update (here
    by the transaction itself, standing in for one the lock did not hold off)."""
    with engine.begin() as conn:
        conn.execute(insert(other), [{"id": 1, "flag": 1}, {"id": 2, "flag": 1}])
    flagged = select(other.c.id).where(other.c.flag == 1)
    stmt = update(rows).where(rows.c.id.in_(flagged)).values(state="x").returning(rows.c.id)
    emulated = LockedReturning.of(stmt)

    with pytest.raises(DatabaseError, match=r"locked 2 rows .* but changed 1"), engine.begin() as conn:
        keys = list(conn.execute(emulated.lock, {}).scalars())
        assert keys == [1, 2]
        conn.execute(update(other).where(other.c.id == 2).values(flag=0))
        # The rest of the emulation, from the rows its locking read found.
        rest = LockedReturning(select(rows.c.id).where(rows.c.id.in_(keys)), emulated.update, emulated.read)
        rest.run(conn, {})
    assert table_of(engine)[1] == ("free", None, 0)  # rolled back


def test_a_connection_that_autocommits_each_statement_is_refused(engine: Engine) -> None:
    """On autocommit, step 1's row locks would end before step 2: no compare-and-set."""
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    with autocommit.connect() as conn, pytest.raises(DatabaseError, match="needs a transaction"):
        take.run(conn, {"p_ids": [9], "p_owner": "a"})
    assert table_of(engine)[9] == ("free", None, 0)
    with engine.begin() as conn:
        assert [r.id for r in take.run(conn, {"p_ids": [9], "p_owner": "a"})] == [9]
