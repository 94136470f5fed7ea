"""A webhook receiver for the outbox's events (the campaign's supervisors and client are
given it as their publisher), and the check of what arrived: at least once, in order per
job."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self) -> None:
        self.arrived: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                if len(body) < length:
                    # The sender was killed mid-request (a fault): not a delivery; the event
                    # is still in its outbox and comes again.
                    self.send_error(400)
                    return
                with receiver.lock:
                    receiver.arrived.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/events"

    def text(self) -> str:
        with self.lock:
            return "\n".join(json.dumps(event) for event in self.arrived)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def per_job(self) -> dict[int, list[dict[str, Any]]]:
        """Each job's events in the order they first arrived (duplicates dropped by id)."""
        seen: set[str] = set()
        jobs: dict[int, list[dict[str, Any]]] = defaultdict(list)
        with self.lock:
            for event in self.arrived:
                if event["id"] in seen or "job" not in event:
                    continue
                seen.add(event["id"])
                jobs[event["job"]].append(event)
        return jobs


FINAL_EVENT = {"succeeded": "job.succeeded", "dead_lettered": "job.dead_lettered", "cancelled": "job.cancelled"}


def problems(
    per_job: dict[int, list[dict[str, Any]]],
    statuses: dict[int, str],
    *,
    complete: bool,
    undelivered: frozenset[int] = frozenset(),
) -> list[tuple[int, str]]:
    """(job, what is wrong) for each job whose events are out of order, or (when the
    outbox drained: `complete`) missing. `undelivered`: jobs with events still in the outbox
    at the end, whose arrived events may stop short of their last (a job cancelled, reopened
    by a workflow retry and cancelled again has its second job.cancelled still to come)."""
    found = []
    for job_id, status in statuses.items():
        events = per_job.get(job_id, [])
        kinds = [e["type"] for e in events]
        if (kinds or complete) and (not kinds or kinds[0] != "job.enqueued"):
            found.append((job_id, f"its first event is not job.enqueued: {kinds[:5]}"))
            continue
        if FINAL_EVENT[status] not in kinds:
            if complete:
                found.append((job_id, f"it ended {status} but {FINAL_EVENT[status]} never arrived: {kinds}"))
        elif kinds[-1] not in {FINAL_EVENT[status], "sla.breached"} and job_id not in undelivered:
            told = [f"{e['type']}#{e.get('attempt')}@{e.get('at', '')[11:23]}" for e in events]
            found.append((job_id, f"it ended {status} but its events, as they arrived, end {told[-8:]}: out of order"))
    return found


def wait_drained(count: Any, timeout: float) -> bool:
    """Wait until `count()` (the outbox's rows) is 0."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if count() == 0:
            return True
        time.sleep(0.5)
    return False
