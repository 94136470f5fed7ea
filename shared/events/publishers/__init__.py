"""Where a relay delivers outbox events: one publisher per `events_publisher` URL.

- ``amqp://user:password@host:5672/vhost?exchange=jobsup&routing_key=jobsup.{type}``
  (or ``amqps://``): RabbitMQ, through pika (the ``jobsup[rabbitmq]`` extra);
- ``https://host/path`` (or ``http://``): a webhook, signed with `events_secret`.

A publisher delivers one event at a time and raises `PublishFailed` when it could not
(the relay puts the event back and backs off, or parks it when the failure is the event's
own); it reconnects by itself on the next try.
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import urlsplit

from jobsup.errors import ConfigurationError, JobsupError
from jobsup.store.outbox import Pending


class PublishFailed(JobsupError):
    """An event could not be delivered. Most failures are the destination's (down, slow,
    refusing everyone): the event stays in the outbox for the next try and the relay backs
    off. A `permanent` failure is this event's own (the destination refused its content):
    trying it again cannot help, so the relay parks it and goes on with the next."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class Publisher(Protocol):
    kind: str  # the metrics label: amqp or webhook
    where: str  # the destination, password hidden

    def publish(self, pending: Pending) -> None:
        """Deliver one event, confirmed by the destination, or raise `PublishFailed`."""

    def idle(self) -> None:
        """Nothing to deliver this turn: keep a connection alive (heartbeats)."""

    def close(self) -> None: ...


MIN_SECRET = 32  # characters of events_secret, as for dashboard_secret
SCHEMES = {"amqp": "amqp", "amqps": "amqp", "http": "webhook", "https": "webhook"}


def check(url: str, secret: str = "") -> str:
    """The kind of publisher `url` names (``amqp`` or ``webhook``), or `ConfigurationError`
    naming the setting."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        raise ConfigurationError(f"events_publisher: {_shown(url)!r} is not a URL ({exc})") from None
    kind = SCHEMES.get(parts.scheme)
    if kind is None or not parts.hostname:
        raise ConfigurationError(
            f"events_publisher: {_shown(url)!r} is not a publisher URL; use amqp://user:password@host:5672/vhost"
            "?exchange=jobsup (RabbitMQ) or https://host/path (a webhook, with events_secret)"
        )
    if kind == "webhook" and not secret:
        raise ConfigurationError("events_secret: a webhook publisher signs every request; set a secret")
    if kind == "webhook" and len(secret) < MIN_SECRET:
        # An HMAC key this short is guessed offline from one captured event.
        raise ConfigurationError(
            f"events_secret is {len(secret)} characters; give {MIN_SECRET} or more random ones "
            "(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    if kind == "webhook" and (parts.username or parts.password):
        raise ConfigurationError(
            f"events_publisher: {_shown(url)!r} carries a user or password, which a webhook does not send; "
            "the receiver checks the events_secret signature instead"
        )
    if kind == "amqp":
        from jobsup.events.publishers.amqp import parse

        parse(url)
    return kind


def publisher_for(url: str, *, secret: str = "", timeout: float = 10.0) -> Publisher:
    kind = check(url, secret)
    if kind == "amqp":
        try:
            import pika  # noqa: F401
        except ImportError:
            raise ConfigurationError(
                "events_publisher: an amqp:// publisher needs pika; install jobsup[rabbitmq]"
            ) from None
        from jobsup.events.publishers.amqp import AmqpPublisher

        return AmqpPublisher(url, timeout=timeout)
    from jobsup.events.publishers.webhook import WebhookPublisher

    return WebhookPublisher(url, secret=secret, timeout=timeout)


def _shown(url: str) -> str:
    """`url` with any password replaced by ***."""
    try:
        parts = urlsplit(url)
        if parts.password:
            return url.replace(f":{parts.password}@", ":***@", 1)
    except ValueError:
        pass
    return url.split("@", 1)[-1] if "@" in url else url
