"""A small application with jobs, as the example test suite beside it tests it
(`test_shop.py`; docs/how-to/testing.md)."""

from typing import Any

import jobsup


@jobsup.job("send-receipt", queue="mail", max_attempts=3)
def send_receipt(ctx: jobsup.JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    if payload["email"].endswith("@invalid"):
        raise ValueError(f"cannot send to {payload['email']}")
    ctx.log.info("receipt for order %s", payload["order"])
    return {"sent_to": payload["email"]}


@jobsup.job("place-order", params={"order": int, "email": str})
def place_order(ctx: jobsup.JobContext, params: dict[str, Any]) -> dict[str, Any]:
    ctx.client.enqueue("send-receipt", {"order": params["order"], "email": params["email"]})
    return {"order": params["order"]}


def checkout(client: jobsup.Client, order: int, email: str) -> int:
    """The application's code under test: it enqueues, a worker does the rest."""
    return client.enqueue("place-order", {"order": order, "email": email})
