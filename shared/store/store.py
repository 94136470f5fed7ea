"""`Store`: every table of one jobsup database, one object each, for the client, the worker and
the supervisor."""

from __future__ import annotations

from jobsup.jobtypes import Resolver
from jobsup.store.audit import Audit
from jobsup.store.breakers import Breakers
from jobsup.store.calendars import CalendarStore
from jobsup.store.concurrency_keys import KEY_WAIT
from jobsup.store.database import Database
from jobsup.store.definitions import Definitions
from jobsup.store.joblogs import JobLogs
from jobsup.store.outbox import Outbox
from jobsup.store.overview import OverviewReads
from jobsup.store.pauses import Pauses
from jobsup.store.processes import ProcessTable
from jobsup.store.progress import Progress
from jobsup.store.reads import Reads
from jobsup.store.recurring import RecurringStore
from jobsup.store.retention import Retention
from jobsup.store.sealed import SealedRows
from jobsup.store.sla import SlaMarks
from jobsup.store.transitions import Transitions
from jobsup.store.websessions import WebSessions


class Store:
    """Every table of one jobsup database, for the client, the worker and the supervisor.

    `holds_leases`: a worker's or a supervisor's store. Its transitions wait at most
    `concurrency_keys.KEY_WAIT` for a concurrency key's row, then raise `LockBusy` to be tried again:
    they hold rows that the renewal of leases or the heartbeat need meanwhile. A client's
    transitions wait for a key as long as it is held, as for any lock."""

    def __init__(self, db: Database, *, holds_leases: bool = False) -> None:
        self.db = db
        self.definitions = Definitions(db)
        self.resolver = Resolver(self.definitions.load)
        self.transitions = Transitions(db, self.resolver, key_wait=KEY_WAIT if holds_leases else None)
        self.reads = Reads(db)
        self.overview = OverviewReads(db)
        self.retention = Retention(db, self.reads)
        self.recurring = RecurringStore(db)
        self.calendars = CalendarStore(db)
        self.processes = ProcessTable(db)
        self.workflows, self.batches = self.transitions.workflows, self.transitions.batches
        self.logs = JobLogs(db)
        self.progress = Progress(db, self.transitions.sql)
        self.sealed = SealedRows(db, self.transitions.sql)
        self.audit = Audit(db)
        self.outbox = Outbox(db, self.audit)
        self.pauses = Pauses(db, self.audit)
        self.breakers = Breakers(db, self.audit, self.resolver)
        self.sla = SlaMarks(self.transitions)
        self.web_sessions = WebSessions(db)

    def schema_check(self) -> None:
        """Raise `SchemaOutdated` unless the schema is at this code's revision."""
        from jobsup.store.migrate import schema_check

        schema_check(self.db)
