"""RabbitMQ through pika's BlockingConnection: publisher confirms on (a publish returns
once the broker took the message, or raises), persistent messages (delivery_mode 2), a
durable topic exchange declared on connect. The routing key is a pattern over the event:
``jobsup.{type}`` by default (``jobsup.job.dead_lettered``). After any connection error the
connection is dropped and the next publish connects again, so a broker restart costs a
retry, not the relay. The message is the event's JSON; its id is also the AMQP message id
(deduplicate by it), its type the AMQP type.

A routing key longer than AMQP's 255 bytes (a long queue or job name in the pattern) is
that event's own failure: it is parked (see `jobsup.store.outbox`), not retried.

Messages go to the exchange without `mandatory`: an event no queue is bound for is dropped
by the broker, as any exchange's unrouted message is. Bind a queue before events flow.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from jobsup.errors import ConfigurationError
from jobsup.events.publishers import PublishFailed
from jobsup.store.outbox import Pending

OWN_OPTIONS = ("exchange", "routing_key")
MAX_ROUTING_KEY = 255  # bytes: an AMQP short string


@dataclass(frozen=True)
class Target:
    broker: str  # the URL pika gets, without jobsup's own options
    exchange: str
    routing_key: str
    host: str
    port: int
    shown: str  # password hidden


def parse(url: str) -> Target:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    exchange = query.get("exchange", "jobsup")
    routing_key = query.get("routing_key", "jobsup.{type}")
    try:
        routing_key.format(type="job.enqueued", queue="q", name="n")
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigurationError(
            f"events_publisher: routing_key {routing_key!r} is not a pattern of {{type}}, {{queue}}, {{name}} ({exc})"
        ) from None
    rest = urlencode([(key, value) for key, value in parse_qsl(parts.query) if key not in OWN_OPTIONS])
    broker = urlunsplit((parts.scheme, parts.netloc, parts.path or "/", rest, ""))
    port = parts.port or (5671 if parts.scheme == "amqps" else 5672)
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1) if parts.password else parts.netloc
    shown = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    return Target(broker, exchange, routing_key, parts.hostname or "", port, shown)


class AmqpPublisher:
    kind = "amqp"

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.target = parse(url)
        self.where = self.target.shown
        self.timeout = timeout
        self._connection: Any = None
        self._channel: Any = None

    def publish(self, pending: Pending) -> None:
        import pika
        from pika.exceptions import AMQPError

        payload = _fields(pending)
        key = self.target.routing_key.format(
            type=pending.type, queue=payload.get("queue", ""), name=payload.get("name", "")
        )
        if len(key.encode()) > MAX_ROUTING_KEY:  # this event's own queue or name made it too long
            raise PublishFailed(
                f"the routing key of event {pending.id} is {len(key.encode())} bytes; AMQP allows {MAX_ROUTING_KEY}",
                permanent=True,
            )
        try:
            channel = self._connected()
            channel.basic_publish(
                exchange=self.target.exchange,
                routing_key=key,
                body=pending.payload.encode(),
                properties=pika.BasicProperties(
                    content_type="application/json",
                    delivery_mode=pika.DeliveryMode.Persistent,
                    message_id=str(payload.get("id", pending.id)),
                    type=pending.type,
                ),
            )
        except AMQPError as exc:
            self._drop()
            raise PublishFailed(self._why(exc)) from None
        except OSError as exc:
            self._drop()
            raise PublishFailed(f"cannot reach the broker {self.where} ({exc})") from None

    def idle(self) -> None:
        if self._connection is not None:
            try:
                self._connection.process_data_events(0)  # answers heartbeats
            except Exception:
                self._drop()

    def close(self) -> None:
        self._drop()

    def _connected(self) -> Any:
        if self._channel is not None and self._channel.is_open:
            return self._channel
        import pika

        self._drop()
        parameters = pika.URLParameters(self.target.broker)
        parameters.socket_timeout = parameters.blocked_connection_timeout = self.timeout
        parameters.connection_attempts = 1
        self._connection = pika.BlockingConnection(parameters)
        channel = self._connection.channel()
        channel.confirm_delivery()
        channel.exchange_declare(self.target.exchange, exchange_type="topic", durable=True)
        self._channel = channel
        return channel

    def _drop(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(Exception):  # already broken: nothing to close cleanly
                connection.close()

    def _why(self, exc: Exception) -> str:
        from pika.exceptions import ProbableAccessDeniedError, ProbableAuthenticationError

        at = f"host {self.target.host}, port {self.target.port}"
        if isinstance(exc, ProbableAuthenticationError) or "ACCESS_REFUSED" in str(exc):
            return f"the broker refused the credentials ({self.where}; {at})"
        if isinstance(exc, ProbableAccessDeniedError):
            return f"the broker denied access to the virtual host ({self.where}; {at})"
        return f"cannot publish to the broker {self.where} ({at}): {type(exc).__name__} {exc}".rstrip()


def _fields(pending: Pending) -> dict[str, Any]:
    import json

    try:
        found = json.loads(pending.payload)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
