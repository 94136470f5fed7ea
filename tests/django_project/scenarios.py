"""What the Django tests do inside a Django process (`python -m scenarios NAME [ARGS]`, with
DJANGO_SETTINGS_MODULE=mysite.settings): each prints one JSON line for the test to check.
Run in a subprocess so that Django's setup never leaks into the pytest worker."""

import json
import sys
import time
from datetime import timedelta
from typing import Any

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.utils import timezone  # noqa: E402
from shop.models import Order  # noqa: E402


def shown(result: Any) -> dict[str, Any]:
    return {
        "id": result.id,
        "status": str(result.status),
        "return_value": result.return_value if str(result.status) == "SUCCESSFUL" else None,
        "errors": [{"class": e.exception_class_path, "traceback": e.traceback} for e in result.errors],
        "attempts": result.attempts,
        "worker_ids": result.worker_ids,
        "enqueued_at": bool(result.enqueued_at),
        "started_at": bool(result.started_at),
        "last_attempted_at": bool(result.last_attempted_at),
        "finished_at": bool(result.finished_at),
        "priority": result.task.priority,
        "queue_name": result.task.queue_name,
        "run_after": result.task.run_after.isoformat() if result.task.run_after else None,
    }


def migrate() -> dict[str, Any]:
    call_command("migrate", verbosity=0)
    return {"ok": True}


def enqueue() -> dict[str, Any]:
    """Enqueue one of each, outside any transaction; return their ids and the first view."""
    from shop.tasks import add_later, explode, receipt, which_attempt  # the backend is made here

    order = Order.objects.create(email="ann@example.com")
    results = {
        "receipt": receipt.enqueue(order.id, greeting="Thanks"),
        "explode": explode.enqueue("on purpose"),
        "context": which_attempt.enqueue("ctx"),
        "async": add_later.enqueue(2, 3),
        "later": add_later.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1),
    }
    return {name: shown(result) for name, result in results.items()}


def refresh(wait: str) -> dict[str, Any]:
    """Enqueue, then refresh each result until it has finished (a worker is running)."""
    from shop.tasks import explode, receipt  # the backend is made here

    order = Order.objects.create(email="bob@example.com")
    results = [receipt.enqueue(order.id, greeting="Hi"), explode.enqueue("refreshed")]
    deadline = time.monotonic() + float(wait)
    for result in results:
        while not result.is_finished and time.monotonic() < deadline:
            time.sleep(0.05)  # a poll of the stored row, as a user's refresh loop does
            result.refresh()
    return {"results": [shown(result) for result in results]}


def get(*ids: str) -> dict[str, Any]:
    from jobsup.contrib.django.framework import task_backends

    return {job_id: shown(task_backends["default"].get_result(job_id)) for job_id in ids}


def atomic(separate: str = "") -> dict[str, Any]:
    """Commit, roll back, roll back a savepoint; the separate backend (PostgreSQL only: on
    SQLite a second connection cannot write while the view's transaction holds the file's
    write lock) commits at once."""
    from shop.tasks import add_later, receipt  # the backend is made here

    ids: dict[str, str] = {}
    with transaction.atomic():
        order = Order.objects.create(email="kept@example.com")
        ids["committed"] = receipt.enqueue(order.id, greeting="Kept").id
    try:
        with transaction.atomic():
            order = Order.objects.create(email="lost@example.com")
            ids["rolled_back"] = receipt.enqueue(order.id, greeting="Lost").id
            if separate:
                ids["separate"] = add_later.using(backend="separate").enqueue(4, 4).id
            raise RuntimeError("the view failed")
    except RuntimeError:
        pass
    with transaction.atomic():
        Order.objects.create(email="outer@example.com")
        ids["outer"] = add_later.enqueue(1, 2).id
        try:
            with transaction.atomic():
                ids["savepoint"] = add_later.enqueue(3, 4).id
                raise RuntimeError("the inner block failed")
        except RuntimeError:
            pass
    emails = sorted(Order.objects.values_list("email", flat=True))
    return {"ids": ids, "orders": emails}


def refused() -> dict[str, Any]:
    """What the framework and the backend refuse, by exception type and message."""
    from shop.tasks import add_later  # the backend is made here

    found = {}
    attempts = {
        "priority": lambda: add_later.using(priority=101),
        "queue": lambda: add_later.using(queue_name="nowhere"),
        "naive": lambda: add_later.using(run_after=timezone.now().replace(tzinfo=None)),
        "arguments": lambda: add_later.enqueue(object(), 1),
    }
    for name, attempt in attempts.items():
        try:
            attempt()
            found[name] = "accepted"
        except Exception as exc:
            found[name] = f"{type(exc).__name__}: {exc}"
    return found


def backend() -> dict[str, Any]:
    """Build the default backend (the bad-configuration tests)."""
    from jobsup.contrib.django.framework import task_backends

    try:
        task_backends["default"]
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "classes": [c.__name__ for c in type(exc).__mro__]}
    return {"error": None}


def drain() -> dict[str, Any]:
    """jobsup.testing's drain runs the enqueued tasks in this process, no worker."""
    from shop.tasks import explode, receipt  # the backend is made here

    from jobsup.contrib.django.framework import task_backends
    from jobsup.testing import drain as run_all

    order = Order.objects.create(email="drained@example.com")
    result = receipt.enqueue(order.id, greeting="Drained")
    failing = explode.enqueue("drained")
    counts = run_all(task_backends["default"].client, "emails")
    counts.update({f"default:{k}": v for k, v in run_all(task_backends["default"].client, "default").items()})
    result.refresh()
    failing.refresh()
    return {"counts": counts, "result": shown(result), "failing": shown(failing)}


if __name__ == "__main__":
    name, *arguments = sys.argv[1:]
    print(json.dumps(globals()[name](*arguments)))
