"""The supervisor process: the arbiter loop.

Signal handlers only put the signal on a `queue.SimpleQueue` (reentrant, so safe inside a
handler) and the loop does the rest: reap dead workers, refill empty slots with backoff.
Workers whose lease renewal is overdue are killed from a thread of its own (`enforce`); a
dead worker's leases are closed from another (`burial`); the process table, maintenance and
the cron tick run on a third (`chores`), so a database that does not answer never stalls
the loop. The order of boot and of shutdown is written out once, in `boot()` and
`shutdown()`.
"""

from __future__ import annotations

import gc
import os
import queue
import signal
import socket
import time
import uuid
from types import FrameType

from setproctitle import setproctitle
from sqlalchemy import select

from jobsup import exits
from jobsup.errors import JobsupError
from jobsup.events import publishing
from jobsup.events.publishers import publisher_for
from jobsup.observe import logs, metrics, metrics_files
from jobsup.observe.events import emit
from jobsup.registry import import_apps, registered_types
from jobsup.secrets import keyring
from jobsup.settings import Settings
from jobsup.store import migrate
from jobsup.store.database import Database
from jobsup.store.outbox import Outbox
from jobsup.store.schema import CANCELLED, DEAD_LETTERED, SUCCEEDED
from jobsup.store.store import Store
from jobsup.supervisor.burial import Burials, burial_of
from jobsup.supervisor.children import Children, Death
from jobsup.supervisor.chores import Chores, ProcessRows, Registration
from jobsup.supervisor.enforce import Enforcer
from jobsup.supervisor.guard import report_errors
from jobsup.supervisor.http import Endpoints, Health, supervisor_routes
from jobsup.supervisor.maintenance import (
    ExpireLeases,
    FinishBatches,
    FinishWorkflows,
    ForgetIdleKeys,
    HalfOpenBreakers,
    Maintenance,
    MarkSlaBreaches,
    OutboxGauges,
    PruneProcesses,
    PurgeAudit,
    PurgeFinished,
    QueueGauges,
    RepairKeys,
    Step,
)
from jobsup.supervisor.recurring import CronTick
from jobsup.supervisor.relay import Relay
from jobsup.worker.slot import Slot as SlotMemory
from jobsup.worker.spec import WorkerSpec
from jobsup.worker.stop import STOP_NOW

TICK = 0.2  # seconds between loop turns when no signal arrives
CHORES_GRACE = 2.0  # seconds a stopping supervisor waits for the chore under way
BURIAL_GRACE = 5.0  # seconds a stopping supervisor keeps retrying its dead workers' burials
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP)


class WorkerBootFailed(JobsupError):
    """A worker failed at boot: restarting it would fail the same way."""


class Arbiter:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.id = f"{socket.gethostname()}:supervisor:{uuid.uuid4().hex[:12]}"
        self.signals: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.stopping: float | None = None  # monotonic time shutdown began
        self.immediate = False
        self.failure: JobsupError | None = None
        self.heartbeat_every = min(settings.heartbeat, settings.maintenance_interval)
        self.workers: tuple[Registration, ...] = ()
        self.chores: Chores | None = None
        self.metrics_dir: str | None = None
        self.db: Database | None = None
        self.children: Children | None = None
        self.endpoints: Endpoints | None = None
        self.relay: Relay | None = None
        self.frozen = False  # what it held at its first fork is out of the collector's reach

    # -- boot ------------------------------------------------------------------------------

    def boot(self) -> None:
        """Metrics directory, apps, database, schema, definitions, registration, children
        and their lease enforcement, HTTP endpoints, signals."""
        self.metrics_dir = metrics_files.prepare_multiprocess()  # before anything imports prometheus_client
        self.import_apps()
        keyring()  # a malformed JOBSUP_ENCRYPTION_KEYS stops the start, not each sealed job later
        setproctitle(f"jobsup: supervisor {self.queue_summary()}")
        self.db = Database(self.settings.database_url, role="supervisor", listen_url=self.settings.listen_url)
        self.db.guard_forks()
        self.store = Store(self.db, holds_leases=True)
        self.store.transitions.sql.compile_ahead()  # what each worker's first claim and settle would compile
        if self.settings.migrate:
            migrate.upgrade(self.db)
        else:
            self.store.schema_check()
        self.warn_incompatible()
        warning = self.db.dialect.wakeup_warning(self.db)
        if warning is not None:
            emit("supervisor.polling", reason=warning)
        self.store.definitions.publish(registered_types(), instance=self.id)
        housekeeping: list[Step] = [
            PruneProcesses(self.store, self.heartbeat_every),
            PurgeFinished(self.store, self.retention()),
            PurgeAudit(self.store, self.settings.retain_audit),
            ForgetIdleKeys(self.store),
        ]
        self.maintenance = Maintenance(
            [
                ExpireLeases(self.store),
                FinishBatches(self.store),
                FinishWorkflows(self.store),
                HalfOpenBreakers(self.store),
                RepairKeys(self.store),
                MarkSlaBreaches(self.store),
                *(housekeeping if self.settings.housekeeping else []),
                QueueGauges(self.store, self.settings.queues),
                *self.events(),
            ]
        )
        self.cron = CronTick(self.store)
        self.burials = Burials(self.store.transitions)
        metrics.start_series(list(self.settings.queues), [step.name for step in self.maintenance.steps])
        self.store.processes.process_register(id=self.id, kind="supervisor", host=socket.gethostname(), pid=os.getpid())
        self.children = Children(self.settings, self.fork_worker)
        self.chores = Chores(
            ProcessRows(self.store, self.id),
            lambda: self.workers,
            self.heartbeat_every,
            self.maintenance.run_once,
            self.settings.maintenance_interval,
            self.cron.run_once if self.settings.housekeeping else None,
        )
        self.chores.start()
        Enforcer(self.children, self.settings.lease, self.settings.heartbeat).start()
        if self.relay is not None:
            self.relay.start()
        self.health = Health(self.ping)
        self.endpoints = self.serve()
        for signum in HANDLED:
            signal.signal(signum, self.on_signal)
        emit("supervisor.started", pid=os.getpid(), queues=self.queue_summary(), database=self.db.safe_url)

    def events(self) -> list[Step]:
        """With a publisher configured: transitions write the outbox (here and in the workers
        forked from here), a relay delivers it, and a gauge watches it."""
        if not self.settings.events_publisher:
            return []
        assert self.db is not None
        settings = self.settings
        publisher = publisher_for(
            settings.events_publisher, secret=settings.events_secret, timeout=settings.events_timeout
        )
        publishing.enable()
        outbox = Outbox(self.db)
        self.relay = Relay(outbox, publisher, self.id)
        return [OutboxGauges(outbox)]

    def warn_incompatible(self) -> None:
        """Jobs waiting with payloads this deploy's parameters no longer fit: said at start,
        by count and reason, before they fail one attempt at a time."""
        for name, (jobs, reasons) in self.store.definitions.incompatible(registered_types()).items():
            emit(
                "definitions.incompatible",
                name=name,
                jobs=jobs,
                reasons="; ".join(f"{count} jobs: {reason}" for reason, count in reasons.most_common()),
            )

    def import_apps(self) -> None:
        # Imported once here, before forking, so every worker shares the code (and a broken
        # app stops `jobsup start` at once instead of fork-looping).
        import_apps(self.settings.apps)
        if self.settings.log_root:  # after the apps: one that set up its own logging keeps it
            logs.share_with_root()

    def retention(self) -> dict[str, float]:
        return {
            SUCCEEDED: self.settings.retain_succeeded,
            DEAD_LETTERED: self.settings.retain_dead_lettered,
            CANCELLED: self.settings.retain_cancelled,
        }

    def serve(self) -> Endpoints | None:
        if self.settings.metrics_port < 0:
            return None
        endpoints = Endpoints.bound(
            self.settings.metrics_host, self.settings.metrics_port, supervisor_routes(self.health)
        )
        endpoints.start()
        return endpoints

    def ping(self) -> None:
        assert self.db is not None
        with self.db.read("health") as conn:
            conn.execute(select(1))

    def queue_summary(self) -> str:
        return " ".join(f"{name}={config.spec}" for name, config in self.settings.queues.items())

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        try:
            self.boot()
            while not self.finished():
                self.health.tick(self.problems())
                self.handle(self.next_signal())
                self.reap()
                if self.stopping is None:
                    self.spawn()
                elif time.monotonic() > self.stopping + self.shutdown_deadline():
                    self.kill_stragglers()
        finally:
            self.shutdown()
        if self.failure is not None:
            raise self.failure
        return exits.STOPPED

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals.put(signum)  # nothing else in a handler: no I/O, no logging, no locks

    def next_signal(self) -> int | None:
        try:
            return self.signals.get(timeout=TICK)
        except queue.Empty:
            return None

    def handle(self, signum: int | None) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            if self.stopping is None:
                self.begin_shutdown(signal.Signals(signum).name)
            elif signum == signal.SIGINT:
                self.stop_now()

    def finished(self) -> bool:
        assert self.children is not None
        return self.stopping is not None and not self.children.alive

    def problems(self) -> list[str]:
        assert self.children is not None
        return [
            f"worker {slot.label} failed at boot {slot.boot_failures} time(s) in a row; retrying"
            for slot in self.children.failing_boot()
        ]

    def spawn(self) -> None:
        assert self.children is not None
        self.children.note_booted()
        spawned = self.children.spawn_due()
        if spawned:
            metrics.set_workers(self.children.counts())
        for child in spawned:
            emit("worker.spawned", worker=child.slot.label, pid=child.pid)
        if spawned:
            self.publish_workers()

    def reap(self) -> None:
        assert self.children is not None
        deaths = self.children.reap()
        for death in deaths:
            self.bury(death)
        if deaths:
            metrics.set_workers(self.children.counts())
            self.publish_workers()

    def publish_workers(self) -> None:
        """The live workers, as the chores thread registers them (a new tuple each time,
        so that thread never reads the loop's own structures while they change)."""
        assert self.children is not None
        self.workers = tuple(
            Registration(child.worker_id, child.pid, child.slot.queue) for child in self.children.alive.values()
        )

    def bury(self, death: Death) -> None:
        assert self.children is not None
        child = death.child
        name = "worker.stopped" if death.clean else "worker.died"
        emit(name, worker=child.slot.label, pid=child.pid, status=exits.describe(death.status))
        report_errors("metrics", lambda: metrics_files.process_dead(child.pid))
        self.burials.add(burial_of(death, self.settings.lease))
        if death.booted:
            child.slot.ever_booted = True
        if self.stopping is not None:
            return
        if death.boot_failed and not child.slot.ever_booted:
            self.failure = WorkerBootFailed(f"worker {child.slot.label} failed at boot; see its log line above")
            self.begin_shutdown("a worker failed at boot")
            return
        emit("worker.restarting", worker=child.slot.label, queue=child.slot.queue)
        delay = self.children.schedule_restart(death)
        if delay:
            emit("worker.restart_delayed", worker=child.slot.label, seconds=round(delay, 1))

    # -- shutdown --------------------------------------------------------------------------

    def begin_shutdown(self, reason: str) -> None:
        """Phase 1: workers stop claiming; a running job gets the shutdown grace."""
        assert self.children is not None
        self.stopping = time.monotonic()
        if self.chores is not None:
            self.chores.wind_down()
        setproctitle(f"jobsup: supervisor {self.queue_summary()} stopping")
        # Said at once, so an operator at the terminal is not left waiting out the grace.
        again = "; SIGINT again (Ctrl-C) releases running jobs now" if reason == "SIGINT" else ""
        emit("supervisor.stopping", reason=reason, grace=self.settings.shutdown_grace, hint=f"jobs may finish{again}")
        self.children.signal_all(signal.SIGTERM)

    def stop_now(self) -> None:
        """A second SIGINT: workers cancel their jobs now, release them, and exit."""
        assert self.children is not None
        self.immediate = True
        emit("supervisor.stopping_now")
        self.children.signal_all(STOP_NOW)

    def shutdown_deadline(self) -> float:
        # Workers need the grace, then a short cancel grace, then time to release and exit.
        cancel_grace = min(5.0, self.settings.heartbeat)
        grace = 0.0 if self.immediate else self.settings.shutdown_grace
        return grace + cancel_grace + 5.0

    def kill_stragglers(self) -> None:
        """Phase 2: SIGKILL what is left; their leases are closed as they are reaped."""
        assert self.children is not None
        emit("supervisor.killing", workers=len(self.children.alive))
        self.children.kill_all()
        time.sleep(0.1)

    def shutdown(self) -> None:
        """Phase 3, on every way out (boot failures included): reap the rest, deregister,
        close the endpoints and remove the metrics directory."""
        if self.children is not None and self.children.alive:
            self.children.kill_all()
            deadline = time.monotonic() + 10
            while self.children.alive and time.monotonic() < deadline:
                self.reap()
                time.sleep(0.05)
        if self.relay is not None:
            self.relay.stop()
        if self.chores is not None:
            self.chores.stop(wait=CHORES_GRACE)
        if self.children is not None:  # booted far enough to have burials
            self.burials.finish(BURIAL_GRACE)
            report_errors("process_deregister", lambda: self.store.processes.process_deregister_all(self.id))
            emit("supervisor.stopped", pid=os.getpid())
        if self.db is not None:
            self.db.dispose()
        if self.endpoints is not None:
            self.endpoints.shutdown()  # else serve_forever polls the closed socket, spinning
            self.endpoints.server_close()
        if self.metrics_dir is not None:
            metrics_files.remove_multiprocess_dir(self.metrics_dir)

    # -- fork ------------------------------------------------------------------------------

    def fork_worker(self, spec: WorkerSpec, slot: SlotMemory) -> int:
        # Block the handled signals across the fork: one arriving before the child has its own
        # handlers would run the supervisor's there and be lost (STOP_NOW's default action
        # would end it). The child unblocks them (receiving any pending) once it is ready.
        assert self.db is not None
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, (*HANDLED, STOP_NOW))
        if not self.frozen:
            # Before the first fork, what the supervisor holds (the libraries, the apps, the
            # statements compiled for its workers at boot) goes out of the collector's reach in
            # every process: a worker's collections would otherwise write to each inherited
            # object's header, copying the pages it shares with the supervisor and its siblings
            # (`gc.freeze`, the Python docs' advice for fork servers; PSS of a supervisor and 4
            # idle workers on PostgreSQL 151 -> 131 MB). Only once: a later freeze would keep
            # for good what its threads held then, soon garbage.
            gc.collect()
            gc.freeze()
            self.frozen = True
        with self.db.forking():  # the chores, burials and relay use the database from their threads
            pid = os.fork()
        if pid == 0:
            from jobsup.worker.boot import main

            sockets = [self.endpoints.fileno()] if self.endpoints is not None else []
            try:
                main(spec, slot, inherited=[self.db], inherited_fds=sockets, signal_mask=mask)
            finally:
                os._exit(exits.CRASHED)  # never return into the supervisor's loop
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return pid
