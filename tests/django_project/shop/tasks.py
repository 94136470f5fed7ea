"""The tasks the tests enqueue."""

from typing import Any

from jobsup.contrib.django.framework import TaskContext

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

from shop.models import Order


@task(queue_name="emails", priority=7)
def receipt(order_id: int, *, greeting: str) -> dict[str, Any]:
    order = Order.objects.get(pk=order_id)  # the worker sees the committed row
    return {"to": order.email, "text": f"{greeting}, order {order_id}", "pair": (1, 2)}


@task()
def explode(reason: str) -> None:
    raise LookupError(f"boom: {reason}")


@task(takes_context=True)
def which_attempt(context: TaskContext, label: str) -> dict[str, Any]:
    return {"label": label, "attempt": context.attempt, "id": context.task_result.id}


@task()
async def add_later(a: int, b: int) -> int:
    return a + b
