"""A job's own log, `ctx.log`: ``ctx.log.info("fetched %d rows", n)`` stores the line in
`jobsup_job_log` with the job's id, attempt, level and the worker's time, and mirrors it to
the worker's own log (the `logging` logger ``jobsup.job.<name>``).

Its trade-offs, up front:

- A log call never waits for the database. Lines are buffered per worker process and
  written in batches, one INSERT of many rows (`jobsup.worker.journal`): every second, as
  soon as 100 are waiting, and when the job's call returns, before its outcome is written.
  A worker that dies keeps what was flushed; the lines of its last second (at most about
  100) are lost.
- Capped per job, over all its attempts: `LINE_CAP` lines and `TEXT_CAP` characters of
  text (characters, not bytes: every database can count those); a line longer than
  `MESSAGE_CAP` is cut, with a marker. What goes over is counted, and once the job's call
  has returned one more line says how much was not stored.
- Scrubbed like stored errors (`jobsup.scrub`): payload contents become ``***``, in the
  stored line and in the mirrored one.
- Never raises into the job: a line that cannot be formatted is stored as what it was
  given; a write that fails is retried at the next flush.
"""

from __future__ import annotations

import logging
import sys
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobsup.scrub import Secrets, scrub

if TYPE_CHECKING:
    from jobsup.store.rows import Lease
    from jobsup.worker.journal import Journal

LINE_CAP = 1000  # lines stored per job, all attempts together
TEXT_CAP = 256 * 1024  # characters of message text stored per job
MESSAGE_CAP = 8 * 1024  # characters of one line; the rest is cut

_LEVELS = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warning", logging.ERROR: "error"}


@dataclass
class Count:
    lines: int = 0
    characters: int = 0

    def add(self, characters: int) -> None:
        self.lines += 1
        self.characters += characters

    def fits(self, characters: int, already: tuple[int, int] = (0, 0)) -> bool:
        """Whether one more line of `characters` stays within the cap, on top of `already`."""
        return already[0] + self.lines < LINE_CAP and already[1] + self.characters + characters <= TEXT_CAP


@dataclass(eq=False)
class Tally:
    """The counts of one attempt's lines against the cap, made with its first line (most
    jobs log nothing). The journal's lock guards them."""

    job_id: int
    attempt: int
    seen: Count = field(default_factory=Count)  # buffered by this attempt
    kept: Count = field(default_factory=Count)  # of those, within the cap once earlier attempts count
    over: Count = field(default_factory=Count)  # refused: over the cap
    lost: Count = field(default_factory=Count)  # refused: the worker held too many unwritten lines
    prior: tuple[int, int] | None = None  # what earlier attempts stored, read at the first flush
    waiting: int = 0  # buffered lines not yet checked against `prior`

    def summary(self) -> str | None:
        """The line that says what was not stored, if anything was not."""
        parts = []
        if self.over.lines:
            parts.append(
                f"{self.over.lines:,} more lines ({self.over.characters:,} characters) were not stored: "
                f"over the per-job cap of {LINE_CAP:,} lines and {TEXT_CAP:,} characters"
            )
        if self.lost.lines:
            parts.append(
                f"{self.lost.lines:,} more lines ({self.lost.characters:,} characters) were not stored: "
                "the worker already held as many lines as it could while the database could not be written"
            )
        return "; ".join(parts) or None


class JobLogger:
    """`ctx.log`: `debug`, `info`, `warning`, `error` and `exception` (with the traceback of
    the exception being handled), with `logging`'s %-formatting."""

    __slots__ = ("attempt", "closed", "job_id", "journal", "lease", "name", "reported", "secrets", "tally")

    def __init__(self, journal: Journal, lease: Lease, name: str, secrets: Secrets) -> None:
        self.journal, self.job_id, self.attempt, self.name, self.secrets = (
            journal, lease.job_id, lease.attempt, name, secrets
        )  # fmt: skip
        self.lease = lease  # what its progress reports are fenced on: written only while it is held
        self.tally: Tally | None = None  # with the first line (under the journal's lock)
        self.closed = False  # the job's call has returned: its attempt's log is over
        self.reported = False  # it reported progress (`Journal.report`)

    def report(self, text: str) -> None:
        """Its job's progress report (`ctx.set_progress`), kept for the journal's next flush."""
        self.journal.report(self, text)

    def debug(self, msg: object, *args: object) -> None:
        self._log(logging.DEBUG, msg, args)

    def info(self, msg: object, *args: object) -> None:
        self._log(logging.INFO, msg, args)

    def warning(self, msg: object, *args: object) -> None:
        self._log(logging.WARNING, msg, args)

    def error(self, msg: object, *args: object) -> None:
        self._log(logging.ERROR, msg, args)

    def exception(self, msg: object, *args: object) -> None:
        self._log(logging.ERROR, msg, args, with_traceback=True)

    def _log(self, level: int, msg: object, args: tuple[object, ...], with_traceback: bool = False) -> None:
        text = message(msg, args, self.secrets, with_traceback)
        mirror = logging.getLogger(f"jobsup.job.{self.name}")
        mirror.log(level, "job=%d attempt=%d %s", self.job_id, self.attempt, text)
        self.journal.add(self, _LEVELS[level], text)


def message(msg: object, args: tuple[object, ...], secrets: Secrets, with_traceback: bool = False) -> str:
    """The text to store: formatted as `logging` would, scrubbed, then cut to `MESSAGE_CAP`
    (scrubbed first, so that a cut cannot leave part of a secret unmasked)."""
    try:
        text = str(msg) % args if args else str(msg)
    except Exception as exc:  # the job's own mistake must not fail the job: keep what it gave
        text = f"{_shown(msg)} {_shown(args)} (not formatted: {type(exc).__name__})"
    if with_traceback and sys.exc_info()[0] is not None:
        text += "\n" + traceback.format_exc().rstrip()
    text = scrub(text, secrets).replace("\x00", "\\0")  # PostgreSQL refuses NUL in text
    if len(text) <= MESSAGE_CAP:
        return text
    marker = f" [cut: {len(text):,} characters]"
    return text[: MESSAGE_CAP - len(marker)] + marker


def _shown(value: object) -> str:
    try:
        return repr(value)
    except Exception:  # a broken __repr__ of the job's own
        return f"<{type(value).__name__}>"
