"""The worker's buffer of what its running jobs report, their log lines
(`jobsup.worker.joblog`) and their progress (`ctx.set_progress`, the latest report per
attempt), and the thread that writes them.

Jobs running at once (pool threads, the event loop) add lines under one lock; nothing on
their path waits for the database. A flush takes everything waiting, checks it against each
job's cap (reading once per attempt what its earlier attempts stored), and writes what is
within it in one transaction, one INSERT of many rows. Flushes run one at a time, so lines
are written in the order they were logged: from the flusher thread every `FLUSH_EVERY`
seconds or as soon as `FLUSH_AT` lines wait, and from the worker's main thread when a job's
call has returned (`finished`), which also writes that job's summary of what went over.

A flush that fails keeps its lines for the next one and says so (`joblog.write_failed`);
while the database cannot be written a worker holds at most `HOLD_AT_MOST` lines and counts
the rest as not stored. The flusher thread is a daemon started with the first line: lines
still buffered when the process ends are lost.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from jobsup.clock import host_clock
from jobsup.errors import DatabaseError, DatabaseUnavailable
from jobsup.observe.events import emit
from jobsup.scrub import Secrets
from jobsup.store.joblogs import JobLogs
from jobsup.store.progress import Progress
from jobsup.store.rows import ClaimedJob, Lease
from jobsup.worker.joblog import JobLogger, Tally

FLUSH_EVERY = 1.0  # seconds between the flusher thread's flushes
FLUSH_AT = 100  # lines waiting that wake it at once
HOLD_AT_MOST = 5000  # unwritten lines a worker keeps while its writes fail


class Journal:
    def __init__(self, logs: JobLogs, progress: Progress) -> None:
        self.logs, self.progress = logs, progress
        # The latest progress report of each attempt, by its lease, not yet written.
        self.reported: dict[Lease, str] = {}
        self.lock = threading.Lock()  # the lists below and every tally's counts
        self.writing = threading.Lock()  # one flush at a time
        # The loggers of running jobs, by job id: only the worker's main thread, which
        # prepares and settles every job, uses it (no lock on the path of a job that never logs).
        self.open: dict[int, JobLogger] = {}
        self.waiting: list[tuple[Tally, dict[str, Any]]] = []  # not yet checked against the cap
        self.unwritten: list[dict[str, Any]] = []  # within the cap, not yet written (under `writing`)
        self.closing: list[Tally] = []  # returned jobs whose summary is not yet decided
        self.held = 0  # lines in `waiting` and `unwritten`
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None

    def logger(self, job: ClaimedJob, secrets: Secrets) -> JobLogger:
        """`job`'s `ctx.log` (the worker's main thread)."""
        logger = self.open[job.id] = JobLogger(self, job.lease, job.name, secrets)
        return logger

    def add(self, logger: JobLogger, level: str, message: str) -> None:
        """Buffer one line (any thread). Never waits for the database."""
        thread, size, row = None, len(message), _row(logger.job_id, logger.attempt, level, message)
        with self.lock:
            if logger.closed:
                return  # logged after its call returned (a thread the job left behind): the attempt is over
            tally = logger.tally
            if tally is None:
                tally = logger.tally = Tally(logger.job_id, logger.attempt)
            if not tally.seen.fits(size):  # over the cap whatever earlier attempts stored
                tally.over.add(size)
                return
            if self.held >= HOLD_AT_MOST:
                tally.lost.add(size)
                return
            tally.seen.add(size)
            tally.waiting += 1
            self.waiting.append((tally, row))
            self.held += 1
            thread = self._new_thread()
            full = len(self.waiting) >= FLUSH_AT
        if thread is not None:
            thread.start()
        if full:
            self.wake.set()

    def report(self, logger: JobLogger, text: str) -> None:
        """Keep an attempt's latest progress report (`ctx.set_progress`) for the next flush
        (any thread); dropped once its call has returned (a thread the job left behind)."""
        with self.lock:
            if logger.closed:
                return
            logger.reported = True
            self.reported[logger.lease] = text
            thread = self._new_thread()
        if thread is not None:
            thread.start()

    def _new_thread(self) -> threading.Thread | None:
        """The flusher thread, made with the first line or report (under the lock); the
        caller starts it once the lock is released."""
        if self.thread is not None:
            return None
        self.thread = threading.Thread(target=self._run, name="jobsup-joblog", daemon=True)
        return self.thread

    def finished(self, job: ClaimedJob) -> None:
        """`job`'s call returned: write its lines, its summary and its progress now, before
        its outcome (main thread)."""
        logger = self.open.pop(job.id, None)
        if logger is None:
            return
        with self.lock:
            logger.closed = True
            if logger.tally is None and not logger.reported:
                return  # it logged and reported nothing
            if logger.tally is not None:
                self.closing.append(logger.tally)
        # After any flush under way (which may put back reports it could not write).
        self.flush()

    def flush(self) -> None:
        """Write what is waiting. Never raises a database error: what it could not write
        stays for the next flush."""
        with self.writing:
            self._write_progress()
            with self.lock:
                taken, self.waiting = self.waiting, []
            try:
                for tally in {tally for tally, _ in taken if tally.prior is None}:
                    tally.prior = self.logs.usage(tally.job_id)
            except DatabaseError as exc:
                with self.lock:
                    self.waiting[:0] = taken  # back in front, checked next time
                emit("joblog.write_failed", lines=self.held, error=exc, retry_in=FLUSH_EVERY)
                return
            with self.lock:
                self.unwritten += self._within_cap(taken) + self._summaries()
                rows = self.unwritten
            if not rows:
                return
            try:
                self.logs.write(rows)
            except DatabaseUnavailable as exc:
                emit("joblog.write_failed", lines=self.held, error=exc, retry_in=FLUSH_EVERY)
                return
            except DatabaseError as exc:
                # Refused rather than unreachable: a line the database will never take must
                # not hold back every line after it. One by one, dropping what it refuses.
                emit("joblog.write_failed", lines=self.held, error=exc, retry_in=0)
                rows = self._write_each(rows)
            with self.lock:
                self.unwritten = self.unwritten[len(rows) :]
                self.held -= len(rows)

    def _write_progress(self) -> None:
        with self.lock:
            taken, self.reported = self.reported, {}
        if not taken:
            return
        try:
            self.progress.write(taken)
        except DatabaseError as exc:
            with self.lock:  # back, unless a newer report came meanwhile
                self.reported = {**taken, **self.reported}
            emit("joblog.write_failed", reports=len(taken), error=exc, retry_in=FLUSH_EVERY)

    def _write_each(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Write `rows` one at a time; the rows dealt with (written, or refused and dropped),
        up to the first the database could not be reached for."""
        done = []
        for row in rows:
            try:
                self.logs.write([row])
            except DatabaseUnavailable:
                break
            except DatabaseError as exc:
                emit("joblog.line_dropped", job=row.get("job_id"), error=exc)
            done.append(row)
        return done

    def _within_cap(self, taken: list[tuple[Tally, dict[str, Any]]]) -> list[dict[str, Any]]:
        """The lines of `taken` within their job's cap, once its earlier attempts count (under the lock)."""
        kept = []
        for tally, row in taken:
            tally.waiting -= 1
            size = len(row["message"])
            if tally.kept.fits(size, already=tally.prior or (0, 0)):
                tally.kept.add(size)
                kept.append(row)
            else:
                tally.over.add(size)
                self.held -= 1
        return kept

    def _summaries(self) -> list[dict[str, Any]]:
        """The summary lines of returned jobs whose every line has been checked (under the lock)."""
        rows, still = [], []
        for tally in self.closing:
            if tally.waiting:
                still.append(tally)  # its lines went back to wait: decided with them
                continue
            text = tally.summary()
            if text is not None:
                rows.append(_row(tally.job_id, tally.attempt, "warning", text))
        self.closing = still
        self.held += len(rows)
        return rows

    def _run(self) -> None:
        while True:
            self.wake.wait(FLUSH_EVERY)
            self.wake.clear()
            try:
                self.flush()
            except Exception:  # the thread must outlive any surprise: the next flush tries again
                logging.getLogger("jobsup").exception("writing job log lines failed")


def _row(job_id: int, attempt: int, level: str, message: str) -> dict[str, Any]:
    return {"job_id": job_id, "attempt": attempt, "logged_at": host_clock(), "level": level, "message": message}
