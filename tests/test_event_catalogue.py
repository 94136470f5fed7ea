"""Each event type is declared once, in `jobsup.events.catalogue`, and every change publishes
one event: the log and the metrics hear an event of no job transition from the same call that
writes it to the outbox, never from a second one, and never miss it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from test_events_announced import announced, open_breaker

import jobsup
from jobsup.events import catalogue

from helpers import claim, fail, succeed

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = [ROOT / part for part in ("shared", "worker", "supervisor", "migrations")]


def _kinds_named(tree: ast.AST) -> Iterator[tuple[str | None, int]]:
    """The event kinds a module's `emit(...)`, `publish(conn, ...)`, `publish_each(conn, ...)`,
    `event(...)` and `report_errors(event=)` name: a literal, a choice of literals, or a name
    bound to one in the module. (None: neither.)"""
    bound: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound[node.targets[0].id] = node.value

    def literals(expr: ast.expr) -> Iterator[str | None]:
        if isinstance(expr, ast.Name) and expr.id in bound:
            expr = bound[expr.id]
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            yield expr.value
        elif isinstance(expr, ast.IfExp):
            yield from literals(expr.body)
            yield from literals(expr.orelse)
        elif (  # {...}.get(key, default): a choice of literals too
            isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get"
        ) and isinstance(expr.func.value, ast.Dict):
            for value in [*expr.func.value.values, *expr.args[1:]]:
                yield from literals(value)
        else:
            yield None

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        position = {"emit": 0, "publish": 1, "publish_each": 1, "event": 0}.get(str(called))
        if position is not None and len(node.args) > position:
            for kind in literals(node.args[position]):
                yield kind, node.lineno
        for keyword in node.keywords:
            if called == "report_errors" and keyword.arg == "event":
                for kind in literals(keyword.value):
                    yield kind, node.lineno


def test_the_catalogue_is_every_event_the_package_emits_or_publishes() -> None:
    undeclared, seen = [], set()
    # Passed on by name: the bus itself, `publish`, and the helper that reports with its caller's kind.
    passing_on = {"observe/events.py", "events/publishing.py", "supervisor/guard.py"}
    for folder in PACKAGE:
        for path in folder.rglob("*.py"):
            for kind, line in _kinds_named(ast.parse(path.read_text())):
                where = f"{path.relative_to(ROOT)}:{line}"
                if kind is None:
                    if not any(str(path).endswith(module) for module in passing_on):
                        undeclared.append(f"{where}: a kind that is not a literal")
                elif kind not in catalogue.KINDS:
                    undeclared.append(f"{where}: {kind}")
                else:
                    seen.add(kind)
    assert undeclared == [], "declare each in jobsup.events.catalogue.KINDS, with a literal name"
    assert seen == set(catalogue.KINDS), f"declared, never emitted: {sorted(set(catalogue.KINDS) - seen)}"


def test_the_metrics_count_only_declared_events() -> None:
    tree = ast.parse((ROOT / "shared/observe/metrics.py").read_text())
    named = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.count(".") == 1
        if node.value.split(".")[0] in {k.split(".")[0] for k in catalogue.KINDS}
    }
    assert named and named <= set(catalogue.KINDS), named - set(catalogue.KINDS)


def test_the_public_types_are_the_catalogues_with_a_meaning() -> None:
    assert set(catalogue.TYPES) == {name for name, kind in catalogue.KINDS.items() if kind.meaning}
    assert "job.dead_lettered" in catalogue.TYPES and "worker.spawned" not in catalogue.TYPES


def test_a_pause_and_a_resume_reach_the_log_once_each(
    client: jobsup.Client, events_on: None, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    client.queues.pause("mail", actor="alice", allow_unknown=True)
    client.queues.pause("mail", actor="alice", allow_unknown=True)  # paused already: no change, no event
    client.queues.resume("mail", actor="bob")
    kinds = [kind for kind, _ in seen if kind.startswith("queue.")]
    assert kinds == ["queue.paused", "queue.resumed"]
    assert [e["type"] for e in announced(client)] == kinds


def test_a_breaker_opening_is_one_event_for_the_outbox_and_the_log(
    client: jobsup.Client, events_on: None, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    open_breaker(client)
    on_bus = [fields for kind, fields in seen if kind == "breaker.opened"]
    in_outbox = [e for e in announced(client) if e["type"] == "breaker.opened"]
    assert len(on_bus) == len(in_outbox) == 1
    assert on_bus[0]["failed_job"] == in_outbox[0]["failed_job"]


def test_a_batch_fired_by_its_last_childs_settle_reaches_the_log(
    client: jobsup.Client, events_on: None, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    batch_id = client.batches.enqueue([{"name": "a"}] * 2, on_complete="report", name="nightly")
    claimed = claim(client, "w1", limit=2)
    succeed(client, claimed[:1])
    fail(client, claimed[1], kind="discarded")
    finished = [fields for kind, fields in seen if kind == "batch.finished"]
    assert [(f["batch"], f["outcome"]) for f in finished] == [(batch_id, "failed")]
    assert len([e for e in announced(client) if e["type"] == "batch.finished"]) == 1
