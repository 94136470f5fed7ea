"""A webhook: each event is POSTed as its JSON to one URL, signed.

Headers: ``X-Jobsup-Event`` (the type), ``X-Jobsup-Event-Id`` (deduplicate by it),
``X-Jobsup-Timestamp`` (Unix seconds) and ``X-Jobsup-Signature: sha256=<hex>``, the
HMAC-SHA256 under `events_secret` of ``<timestamp>.<body>`` (the raw body bytes). A
receiver recomputes it over the bytes it got, compares in constant time, and refuses a
timestamp far from its own clock (a replay). Any 2xx answer is a delivery. A 400, 413, 415
or 422 says the receiver will never take this body: the event is parked (`jobsup events`),
and the relay goes on. Anything else (a 5xx, a 401 or 404 from a misconfigured receiver, a
redirect, a timeout, a refused connection) is the destination's failure, which the relay
retries with backoff, and counts.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from jobsup.events.publishers import PublishFailed
from jobsup.store.outbox import Pending

# Answers about the request's own content. Others (401, 403, 404, 429, ...) would refuse
# every event alike: parking them all would empty the outbox into the parked list.
REFUSED_FOR_GOOD = frozenset({400, 413, 415, 422})


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The value of ``X-Jobsup-Signature`` for `body` sent at `timestamp`."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


class WebhookPublisher:
    kind = "webhook"

    def __init__(self, url: str, *, secret: str, timeout: float = 10.0) -> None:
        self.url, self.secret, self.timeout = url, secret, timeout
        self.where = destination(url)

    def publish(self, pending: Pending) -> None:
        body = pending.payload.encode()
        timestamp = str(int(time.time()))
        event_id = _event_id(pending)
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "User-Agent": "jobsup",
                "X-Jobsup-Event": pending.type,
                "X-Jobsup-Event-Id": event_id,
                "X-Jobsup-Timestamp": timestamp,
                "X-Jobsup-Signature": signature(self.secret, timestamp, body),
            },
        )
        try:
            with _opener.open(request, timeout=self.timeout) as answer:
                status = answer.status
        except urllib.error.HTTPError as exc:
            permanent = exc.code in REFUSED_FOR_GOOD
            raise PublishFailed(f"the webhook {self.where} answered {exc.code}", permanent=permanent) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PublishFailed(f"cannot reach the webhook {self.where} ({reason})") from None
        except http.client.HTTPException as exc:  # an answer that is not HTTP: the receiver's fault
            raise PublishFailed(f"the webhook {self.where} gave no HTTP answer ({type(exc).__name__})") from None
        if not 200 <= status < 300:
            raise PublishFailed(f"the webhook {self.where} answered {status}")

    def idle(self) -> None:
        pass

    def close(self) -> None:
        pass


def destination(url: str) -> str:
    """`url` as logs, stored errors and the API show it: scheme, host and port. Many
    receivers (Slack, Discord, Teams, Zapier) carry their credential in the path, and a
    read-only dashboard user reads these errors."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    shown = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        shown += f":{parts.port}"
    hidden = "/***" if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{shown}{hidden}"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer that is not 2xx: never follow it with the signed body."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def _event_id(pending: Pending) -> str:
    import json

    try:
        return str(json.loads(pending.payload).get("id", pending.id))
    except (ValueError, AttributeError):
        return str(pending.id)
