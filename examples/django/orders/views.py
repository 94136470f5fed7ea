"""POST /orders records an order and enqueues its receipt in one transaction: both commit,
or (the address already has an order) neither. GET /tasks/<id> reports the task.

    python manage.py migrate                                  # Django's tables, in ./db.sqlite3
    jobsup db upgrade --database-url sqlite:///db.sqlite3     # jobsup's, beside them
    python manage.py runserver                                # the web app
    DJANGO_SETTINGS_MODULE=mysite.settings jobsup start --app jobsup.contrib.django.worker \
        --database-url sqlite:///db.sqlite3 --queue emails=1  # the worker, in another terminal
"""

from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse

from orders.models import Order
from orders.tasks import send_receipt


def checkout(request: HttpRequest) -> JsonResponse:
    email = request.POST.get("email", "")
    if "@" not in email:
        return JsonResponse({"error": "give an email"}, status=400)
    try:
        with transaction.atomic():
            result = send_receipt.enqueue(email)  # the job's row, in this transaction
            Order.objects.create(email=email)  # refused for a second order of one address
    except IntegrityError:  # rolled back: the job enqueued above with it
        return JsonResponse({"error": "an order for this address exists"}, status=409)
    return JsonResponse({"task": result.id}, status=202)


def task_status(request: HttpRequest, task_id: str) -> JsonResponse:
    result = send_receipt.get_result(task_id)
    body: dict[str, Any] = {"status": str(result.status)}
    if result.is_finished and not result.errors:
        body["return_value"] = result.return_value
    return JsonResponse(body)
