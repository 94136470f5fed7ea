"""The real RabbitMQ on 127.0.0.1:5672 for the event tests: an exchange and queue of each
test's own, a consumer that drains it, and a TCP proxy a test can stop to make the broker
unreachable for the relay alone (the system broker is never restarted)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import uuid
from collections import defaultdict
from typing import Any

import pika
import pytest

BROKER = "amqp://guest:guest@127.0.0.1:5672/%2F"


def broker_error() -> str | None:
    """Why RabbitMQ cannot be used, or None when it can."""
    try:
        pika.BlockingConnection(pika.URLParameters(BROKER + "?socket_timeout=5&connection_attempts=1")).close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def require_broker() -> None:
    if os.environ.get("JOBSUP_TEST_RABBITMQ") == "skip":
        pytest.skip("RabbitMQ tests switched off by JOBSUP_TEST_RABBITMQ=skip")
    error = broker_error()
    if error:
        pytest.fail(
            f"RabbitMQ is not reachable at 127.0.0.1:5672 ({error}); start it, or set JOBSUP_TEST_RABBITMQ=skip "
            "to leave the RabbitMQ tests out",
            pytrace=False,
        )


class Exchange:
    """A durable topic exchange of this test's own, with a queue bound to all of it."""

    def __init__(self) -> None:
        self.name = f"jobsup_test_{uuid.uuid4().hex[:12]}"
        self.connection = pika.BlockingConnection(pika.URLParameters(BROKER))
        self.channel = self.connection.channel()
        self.channel.exchange_declare(self.name, exchange_type="topic", durable=True)
        self.queue = self.channel.queue_declare(self.name, durable=True).method.queue
        self.channel.queue_bind(self.queue, self.name, "#")
        self.received: list[dict[str, Any]] = []

    def url(self, broker: str = BROKER) -> str:
        return f"{broker}?exchange={self.name}"

    def drain(self) -> list[dict[str, Any]]:
        """Everything received so far (each message's JSON, with its AMQP properties)."""
        while True:
            method, properties, body = self.channel.basic_get(self.queue, auto_ack=True)
            if method is None:
                return self.received
            event = json.loads(body)
            event["_amqp"] = {
                "routing_key": method.routing_key,
                "message_id": properties.message_id,
                "delivery_mode": properties.delivery_mode,
            }
            self.received.append(event)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.channel.queue_delete(self.queue)
            self.channel.exchange_delete(self.name)
        with contextlib.suppress(Exception):
            self.connection.close()


def by_job(events: list[dict[str, Any]]) -> dict[int, list[str]]:
    """Each job's event types in the order they arrived, duplicates (same id) dropped."""
    seen: set[str] = set()
    types: dict[int, list[str]] = defaultdict(list)
    for event in events:
        if event["id"] not in seen:
            seen.add(event["id"])
            types[event["job"]].append(event["type"])
    return types


class Proxy:
    """A TCP proxy to the broker that the test owns: `stop()` refuses new connections and
    cuts the open ones (the broker looks gone to whoever connects through it); `start()`
    serves again on the same port."""

    def __init__(self, target: tuple[str, int] = ("127.0.0.1", 5672)) -> None:
        self.target = target
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.listener: socket.socket | None = None
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()

    @property
    def broker(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self.lock:
            for sock in self.open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self.open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_RDWR)
