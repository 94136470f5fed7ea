"""The mixed workload, drawn from the campaign's seeded random generator.

Each operation enqueues something through the public API and notes the ids jobsup
returned in the ledger. Shapes that are known to stress the promises are drawn often:
batches whose newest child waits for a busy concurrency key, keyed waiters with a short
SLA, rate-limited bursts led by a slow job (which a claim batch holds back), jobs longer
than a heartbeat.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from typing import Any

import jobsup
from tests.chaos.ledger import Ledger
from tests.chaos.limits import QUIET

K1_KEYS = ["a", "b", "c", "d", "e"]
K3_KEYS = ["x", "y"]
BACKLOG = 1000  # unfinished jobs above which the workload waits


class Workload:
    def __init__(self, rng: random.Random, client: jobsup.Client, ledger: Ledger, marker: str) -> None:
        self.rng, self.client, self.ledger, self.marker = rng, client, ledger, marker
        self.fresh_keys = 0
        self.looked, self.backlog = 0.0, 0
        self.operations: list[tuple[float, Callable[[], str]]] = [
            (3, self.plain),
            (3, self.keyed),
            (6, self.keyed_batch),
            (2, self.keyed_sla),
            (2, self.rated_burst),
            (2, self.fragile),
            (2, self.workflow),
            (2, self.batch),
            (2, self.trigger),
            (2, self.pooled),
            (1, self.secret),
            (2, self.fleeting),
            (1, self.bulk),
            (2, self.quiet),
        ]

    def step(self) -> str | None:
        """One operation; only small ones (a few jobs each, on queues of their own) while the
        backlog is over `BACKLOG` (the host is slower than the workload: more would only make
        the quiescent end wait longer)."""
        if time.time() - self.looked >= 1:
            self.looked, self.backlog = time.time(), self._backlog()
        light = {self.keyed, self.keyed_sla, self.rated_burst, self.fragile, self.trigger}
        drawn = self.operations if self.backlog <= BACKLOG else [(w, op) for w, op in self.operations if op in light]
        operation = self.rng.choices([op for _, op in drawn], [weight for weight, _ in drawn])[0]
        return operation()

    # -- payloads ---------------------------------------------------------------------------

    def seconds(self) -> float:
        """Mostly short, some longer than a heartbeat (2 s), a few near the lease (8 s)."""
        return self.rng.choice([0, 0, 0, 0.05, 0.05, 0.1, 0.1, 0.3, 0.5, 1, 1.5, 2.5, 3, 6])

    def payload(self, **more: Any) -> dict[str, Any]:
        payload: dict[str, Any] = {"s": self.seconds(), **more}
        if self.rng.random() < 0.15:
            payload["fail"] = [1] if self.rng.random() < 0.8 else [1, 2, 3]
        if self.rng.random() < 0.3:
            payload["honour"] = True
        return payload

    def _enqueue(self, kind: str, name: str, payload: Any, **options: Any) -> int:
        job_id = self.client.enqueue(name, payload, **options)
        self.ledger.took(kind, [job_id])
        return job_id

    # -- operations -------------------------------------------------------------------------

    def plain(self) -> str:
        specs = [{"name": "plain", "payload": self.payload()} for _ in range(self.rng.randint(1, 5))]
        ids = self.ledger.took("plain", self.client.enqueue_many(specs))
        return f"enqueue plain {ids}"

    def fleeting(self) -> str:
        specs = [{"name": "fleeting", "payload": self.payload()} for _ in range(self.rng.randint(1, 5))]
        ids = self.ledger.took("fleeting", self.client.enqueue_many(specs))
        return f"enqueue fleeting {ids}"

    def bulk(self) -> str:
        """A bulk enqueue longer than the database's side-by-side chunk (on PostgreSQL built
        and inserted a chunk at a time, `jobsup.client.bulk`): all or none of it is written,
        whatever fault lands meanwhile (checked by `checker.bulks`)."""
        chunk = self.client.database.dialect.bulk_chunk
        size = chunk + self.rng.randint(1, 200) if chunk else self.rng.randint(200, 400)
        tag = uuid.uuid4().hex[:8]
        self.ledger.bulks[tag] = (size, None)  # before the call: a raise leaves it None
        specs = [{"name": "plain", "payload": {"s": 0, "bulk": tag}} for _ in range(size)]
        ids = self.client.enqueue_many(specs)
        self.ledger.bulks[tag] = (size, ids)
        self.ledger.took("plain", ids)
        return f"enqueue bulk tag={tag} ({len(ids)})"

    def quiet(self) -> str:
        """Short plain jobs, enough for large claims, on the queue whose worker publishes no
        events: its claims' successes are written behind each claim (`limits.QUIET`)."""
        specs = [{"name": "plain", "queue": QUIET, "payload": {"s": 0}} for _ in range(self.rng.randint(40, 160))]
        ids = self.ledger.took("plain", self.client.enqueue_many(specs))
        return f"enqueue quiet ({len(ids)})"

    def keyed(self) -> str:
        ids = []
        for _ in range(self.rng.randint(1, 4)):
            if self.rng.random() < 0.6:
                key = self.rng.choice(K1_KEYS)
                ids.append(self._enqueue("k1", "k1", self.payload(k=key), concurrency_key=key))
            else:
                key = self.rng.choice(K3_KEYS)
                ids.append(self._enqueue("k3", "k3", self.payload(k=key), concurrency_key=key))
        return f"enqueue keyed {ids}"

    def keyed_batch(self) -> str:
        """A keyed job Z that holds its key, then a batch of short plain children whose
        newest child waits for Z's key: every sibling's settle looks at that newest child."""
        self.fresh_keys += 1
        key = f"f{self.fresh_keys}"  # a key of its own: a later job of the key would repair a lost slot
        z = self._enqueue("k1", "k1", {"s": self.rng.uniform(0.5, 5), "k": key}, concurrency_key=key, priority=10)
        children: list[dict[str, Any]] = [
            {"name": "fan", "payload": {"s": self.rng.choice([0, 0, 0.02])}} for _ in range(self.rng.randint(60, 140))
        ]
        children.append({"name": "k1", "payload": {"s": 0.1, "k": key}, "concurrency_key": key})
        tag = uuid.uuid4().hex[:8]
        batch_id = self.client.batches.enqueue(children, on_complete=("callback", {"kind": "on_complete", "tag": tag}))
        info = self.client.batches.get(batch_id)
        self.ledger.batches[batch_id] = {"callbacks": ["on_complete"], "size": len(children)}
        ids = self._batch_ids(batch_id)
        self.ledger.took("batch-child", ids)
        return f"enqueue keyed-batch key=k1:{key} z={z} batch={batch_id} children={len(children)} newest={ids[-1:]}" + (
            "" if info is not None else " (batch not found)"
        )

    def keyed_sla(self) -> str:
        self.fresh_keys += 1
        key = f"s{self.fresh_keys}"
        holder = self._enqueue("k1", "k1", {"s": 3, "k": key}, concurrency_key=key)
        waiters = [
            self._enqueue("k1", "k1", {"s": 0.2, "k": key}, concurrency_key=key, start_within="1s")
            for _ in range(self.rng.randint(1, 3))
        ]
        return f"enqueue keyed-sla key=k1:{key} holder={holder} waiters={waiters}"

    def rated_burst(self) -> str:
        """A slow job first (it holds the rest of a claim batch back), then quick ones."""
        first = self._enqueue("rated", "rated", {"s": self.rng.choice([0.85, 0.9, 0.95])}, priority=10)
        specs = [{"name": "rated", "payload": {"s": 0}} for _ in range(self.rng.randint(5, 15))]
        ids = self.ledger.took("rated", self.client.enqueue_many(specs))
        return f"enqueue rated-burst first={first} then={ids}"

    def fragile(self) -> str:
        specs = [
            {"name": "fragile", "payload": {"s": self.rng.choice([0, 0.5, 2, 4])}}
            for _ in range(self.rng.randint(1, 4))
        ]
        ids = self.ledger.took("fragile", self.client.enqueue_many(specs))
        return f"enqueue fragile {ids}"

    def workflow(self) -> str:
        wf = jobsup.Workflow("chaos")
        policy = lambda: self.rng.choice(["cancel", "run"])  # noqa: E731
        if self.rng.random() < 0.5:
            a = wf.add("step", self.payload(), step="a")
            b = wf.add("step", self.payload(), deps=[a], step="b", on_failure=policy())
            c = wf.add("step", self.payload(), deps=[a], step="c", on_failure=policy())
            wf.add("step", self.payload(), deps=[b, c], step="d", on_failure=policy())
            shape = "diamond"
        else:
            previous = wf.add("step", self.payload(), step="s0")
            for index in range(1, self.rng.randint(2, 4)):
                previous = wf.add("step", self.payload(), deps=[previous], step=f"s{index}", on_failure=policy())
            shape = "chain"
        workflow_id = self.client.workflows.enqueue(wf)
        info = self.client.workflows.get(workflow_id)
        steps = [step.job_id for step in info.steps] if info is not None else []
        self.ledger.workflows[workflow_id] = steps
        self.ledger.took("step", steps)
        return f"enqueue workflow {shape} id={workflow_id} steps={steps}"

    def batch(self) -> str:
        kinds = ["plain", "pooled", "aio"]
        children = [{"name": self.rng.choice(kinds), "payload": self.payload()} for _ in range(self.rng.randint(2, 10))]
        tag = uuid.uuid4().hex[:8]
        callbacks = {"on_complete": ("callback", {"kind": "on_complete", "tag": tag})}
        if self.rng.random() < 0.5:
            callbacks["on_success"] = ("callback", {"kind": "on_success", "tag": tag})
            callbacks["on_failure"] = ("callback", {"kind": "on_failure", "tag": tag})
        batch_id = self.client.batches.enqueue(children, **callbacks)  # type: ignore[arg-type]
        self.ledger.batches[batch_id] = {"callbacks": sorted(callbacks), "size": len(children)}
        ids = self.ledger.took("batch-child", self._batch_ids(batch_id))
        return f"enqueue batch id={batch_id} children={ids} callbacks={sorted(callbacks)}"

    def trigger(self) -> str:
        tag = uuid.uuid4().hex[:8]
        parent = self._enqueue(
            "plain", "plain", self.payload(), then=[jobsup.Trigger("note", on="any", payload={"parent": tag})]
        )
        self.ledger.triggers[tag] = parent
        return f"enqueue trigger parent={parent} tag={tag}"

    def pooled(self) -> str:
        name = self.rng.choice(["pooled", "aio"])
        specs = [{"name": name, "payload": self.payload()} for _ in range(self.rng.randint(2, 8))]
        if self.rng.random() < 0.3:
            # Quick jobs, then long ones behind them: a pool claims ahead of its free places
            # after the quick ones, and must give back what waits behind the long ones.
            quick = lambda: {"name": name, "payload": {"s": 0}}  # noqa: E731
            specs = [*(quick() for _ in range(20)), *specs, *(quick() for _ in range(10))]
            for spec in specs[20:-10]:
                spec["payload"]["s"] = self.rng.choice([6, 8])
        ids = self.ledger.took(name, self.client.enqueue_many(specs))
        return f"enqueue {name} {ids}"

    def secret(self) -> str:
        job_id = self._enqueue("secret", "secret", {"token": self.marker, "s": self.rng.choice([0, 0.5, 3])})
        return f"enqueue secret {job_id}"

    def _backlog(self) -> int:
        from sqlalchemy import func, select

        from jobsup.store import schema

        with self.client.database.read() as conn:
            unfinished = schema.job.c.status.in_(["pending", "running", "waiting"])
            return int(conn.execute(select(func.count()).where(unfinished)).scalar() or 0)

    def _batch_ids(self, batch_id: int) -> list[int]:
        from sqlalchemy import select

        from jobsup.store.schema import job

        with self.client.database.read() as conn:
            return [
                row[0] for row in conn.execute(select(job.c.id).where(job.c.batch_id == batch_id).order_by(job.c.id))
            ]
