"""Faults at random times: process deaths and signals, and an operator's hand.

Process faults (kill -9 of a worker, of a whole host, SIGTERM of a supervisor, a restart of
the database) are spaced `PROCESS_GAP` seconds apart at least; a supervisor that is lost or
stopped is replaced at once by one of the same role. Operator faults cancel pending and
running jobs (keyed ones with waiters first: what a cancel frees is what it must not free
early), cancel workflows (and retry them at once), retry dead letters, pause and resume
queues, and start and end a partner outage that fails the breaker type.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import jobsup
from tests.chaos.ledger import Ledger
from tests.chaos.processes import Fleet
from tests.chaos.sidechannel import Runs

PROCESS_GAP = 4.0
QUEUES = ["default", "keys", "partner", "fragile", "pool", "aio"]


class Faults:
    def __init__(
        self,
        rng: random.Random,
        client: jobsup.Client,
        ledger: Ledger,
        fleet: Fleet,
        runs: Runs,
        roles: dict[str, list[str]],
        outage: Path,
        restart_database: Callable[[], None] | None,
    ) -> None:
        self.rng, self.client, self.ledger, self.fleet, self.runs = rng, client, ledger, fleet, runs
        self.roles, self.outage, self.restart_database = roles, outage, restart_database
        self.last_process_fault = time.time()
        self.paused: dict[str, float] = {}  # queue -> when to resume it
        self.operations: list[tuple[float, Callable[[], str | None]]] = [
            (3, self.cancel_pending),
            (4, self.cancel_running),
            (2, self.cancel_workflow),
            (1, self.retry_workflow),
            (1, self.retry_dead_letter),
            (1, self.pause),
            (1, self.toggle_outage),
            (2, self.kill_worker),
            (1, self.lose_host),
            (1, self.terminate),
        ]
        if restart_database is not None:
            self.operations.append((1, self.restart))

    def step(self) -> str | None:
        """One fault, or None when the one drawn had nothing to act on."""
        self.resume_due()
        weights = [weight for weight, _ in self.operations]
        return self.rng.choices([op for _, op in self.operations], weights)[0]()

    # -- the operator -----------------------------------------------------------------------

    def cancel_pending(self) -> str | None:
        candidates = [job_id for job_id, kind in self.ledger.jobs_now() if kind != "batch-child"]
        if not candidates:
            return None
        job_id = self.rng.choice(candidates[-30:])
        return f"cancel {job_id} -> {self.client.cancel(job_id, actor='chaos')}"

    def cancel_running(self) -> str | None:
        self.runs.refresh()
        now = time.time()
        running = [r for r in self.runs.running() if now - r.last_seen < 1.0 and r.job in self.ledger.jobs]
        if not running:
            return None
        keyed = [r for r in running if r.key is not None and r.key.startswith("k1:")]
        probes = [r for r in running if r.extra.get("probe")]
        chosen = self.rng.choice(
            probes if probes and self.rng.random() < 0.6 else keyed if keyed and self.rng.random() < 0.7 else running
        )
        done = self.client.cancel(chosen.job, actor="chaos")
        self.ledger.cancelled_running.append((now, chosen.job))
        return f"cancel running {chosen.job} ({chosen.name} key={chosen.key} attempt={chosen.attempt}) -> {done}"

    def cancel_workflow(self) -> str | None:
        if not self.ledger.workflows:
            return None
        self.runs.refresh()
        running = {r.job for r in self.runs.running()}
        busy = [w for w, steps in list(self.ledger.workflows.items()) if running & set(steps)]
        workflow_id = self.rng.choice(busy if busy else list(self.ledger.workflows)[-10:])
        cancelled = self.client.workflows.cancel(workflow_id, actor="chaos")
        said = f"cancel_workflow {workflow_id} -> {cancelled}"
        if self.rng.random() < 0.6:
            said += "; " + self._retry_workflow(workflow_id)
        return said

    def retry_workflow(self) -> str | None:
        if not self.ledger.workflows:
            return None
        return self._retry_workflow(self.rng.choice(list(self.ledger.workflows)))

    def _retry_workflow(self, workflow_id: int) -> str:
        try:
            return f"retry_workflow {workflow_id} -> {self.client.workflows.retry(workflow_id, actor='chaos')}"
        except jobsup.BadInput as exc:
            return f"retry_workflow {workflow_id} refused: {exc}"

    def retry_dead_letter(self) -> str | None:
        parents = set(self.ledger.triggers.values())  # a retried one ends twice: its trigger fires twice
        dead = [job for job in self.client.dead_letters.list(limit=50) if job.id not in parents]
        if not dead:
            return None
        job = self.rng.choice(dead)
        self.ledger.retried.add(job.id)
        self.ledger.retried_at.setdefault(job.id, []).append(time.time())  # issued: before it commits
        return f"dead-letter retry {job.id} -> {self.client.dead_letters.retry(job.id, actor='chaos')}"

    def pause(self) -> str | None:
        queue = self.rng.choice([q for q in QUEUES if q not in self.paused])
        self.paused[queue] = time.time() + self.rng.uniform(1, 5)
        return f"pause {queue} -> {self.client.queues.pause(queue, reason='chaos', actor='chaos', allow_unknown=True)}"

    def resume_due(self, everything: bool = False) -> None:
        """Resume the queues whose pause is over. A queue is forgotten only once its resume
        went through: a resume that met a database restart is tried again at the next step
        (forgotten at once, the queue stayed paused to the end and all its jobs looked stuck)."""
        for queue, at in list(self.paused.items()):
            if everything or time.time() >= at:
                resumed = self.client.queues.resume(queue, actor="chaos")
                del self.paused[queue]
                self.ledger.note(f"resume {queue} -> {resumed}", fault=True)

    def toggle_outage(self) -> str:
        if self.outage.exists():
            self.outage.unlink()
            return "partner outage ends (fragile succeeds)"
        self.outage.touch()
        return "partner outage starts (fragile fails)"

    def end_outage(self) -> None:
        if self.outage.exists():
            self.outage.unlink()
            self.ledger.note("partner outage ends (quiescence)", fault=True)

    # -- processes --------------------------------------------------------------------------

    def _process_fault_due(self) -> bool:
        if time.time() - self.last_process_fault < PROCESS_GAP:
            return False
        self.last_process_fault = time.time()
        return True

    def kill_worker(self) -> str | None:
        if not self._process_fault_due():
            return None
        supervisors = [s for s in self.fleet.live() if s.workers()]
        if not supervisors:
            return None
        supervisor = self.rng.choice(supervisors)
        self.runs.refresh()
        busy = {r.pid for r in self.runs.running()}
        workers = supervisor.workers()
        chosen = [w for w in workers if w in busy] or workers
        pid = self.rng.choice(chosen)
        self.fleet.kill_worker(supervisor, pid)
        jobs = sorted({r.job for r in self.runs.running() if r.pid == pid})
        return f"kill -9 worker {pid} of supervisor {supervisor.pid} ({supervisor.role}) running jobs {jobs}"

    def lose_host(self) -> str | None:
        if not self._process_fault_due() or not self.fleet.live():
            return None
        supervisor = self.rng.choice(self.fleet.live())
        self.runs.refresh()
        pids = {supervisor.pid, *supervisor.workers()}
        jobs = sorted({r.job for r in self.runs.running() if r.pid in pids})
        self.fleet.lose_host(supervisor)
        new = self.fleet.start(supervisor.role, self.roles[supervisor.role])
        return f"kill -9 host {supervisor.pid} ({supervisor.role}) running jobs {jobs}; new supervisor {new.pid}"

    def terminate(self) -> str | None:
        if not self._process_fault_due() or not self.fleet.live():
            return None
        supervisor = self.rng.choice(self.fleet.live())
        self.fleet.terminate(supervisor)
        new = self.fleet.start(supervisor.role, self.roles[supervisor.role])
        return f"SIGTERM supervisor {supervisor.pid} ({supervisor.role}); new supervisor {new.pid}"

    def restart(self) -> str | None:
        if not self._process_fault_due() or self.restart_database is None:
            return None
        started = time.time()
        self.restart_database()
        return f"restart the database, {time.time() - started:.3f}s"
