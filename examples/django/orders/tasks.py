"""The example's task: run by `jobsup start --app jobsup.contrib.django.worker`."""

from orders.models import Order

try:
    from django.tasks import task
except ImportError:  # Django before 6.0: the backport
    from django_tasks import task  # type: ignore[no-redef]


@task(queue_name="emails", priority=10)
def send_receipt(email: str) -> dict[str, str]:
    order = Order.objects.get(email=email)  # committed with the job: the worker sees it
    return {"sent_to": order.email, "order": str(order.pk)}
