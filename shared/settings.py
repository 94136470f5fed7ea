"""One settings object. Sources, later wins: defaults, ``jobsup.toml`` (or ``[tool.jobsup]``
in ``pyproject.toml``) in the working directory, ``JOBSUP_*`` environment variables, and
explicit overrides (CLI flags, constructor arguments).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from jobsup.checks import check_name
from jobsup.durations import parse_duration
from jobsup.errors import ConfigurationError

DEFAULT_URL = "sqlite:///jobsup.db"  # a SQLite file in the working directory

_DURATIONS = {
    "lease",
    "heartbeat",
    "poll_interval",
    "maintenance_interval",
    "shutdown_grace",
    "retain_succeeded",
    "retain_dead_lettered",
    "retain_cancelled",
    "retain_audit",
    "events_timeout",
}


MAX_CONCURRENCY = 1000  # jobs at once in one worker process


@dataclass(frozen=True)
class QueueConfig:
    """Per queue: how many worker processes, how many jobs each runs at once (threads for
    plain functions, one event loop for ``async def`` jobs), and optional claim batch and
    job timeout."""

    workers: int = 1
    claim_batch: int | None = None
    timeout: float | None = None
    concurrency: int = 1

    @property
    def spec(self) -> str:
        """As ``--queue`` takes it: NAME=WORKERS[:CONCURRENCY] without the name."""
        return f"{self.workers}" if self.concurrency == 1 else f"{self.workers}:{self.concurrency}"


@dataclass(frozen=True)
class Settings:
    database_url: str = DEFAULT_URL
    # Where idle workers LISTEN on PostgreSQL: empty for the database URL (none behind a
    # pooler such as PgBouncer, where notifications never arrive: they poll), a direct
    # postgresql:// URL of the server, or "off" to poll.
    listen_url: str = ""
    lease: float = 300.0
    heartbeat: float = 60.0
    # None: the dialect's own (1 s on SQLite; 5 s on PostgreSQL, where LISTEN/NOTIFY wakes workers)
    poll_interval: float | None = None
    maintenance_interval: float = 15.0
    shutdown_grace: float = 20.0
    claim_batch: int | None = None  # None: adaptive (`jobsup.worker.claimsize`)
    queues: Mapping[str, QueueConfig] = field(default_factory=lambda: {"default": QueueConfig()})
    apps: tuple[str, ...] = ()
    migrate: bool = True
    # The instance-wide duties beside the lease sweep: the retention purge, pruning the
    # process table and firing recurring schedules. Off for an instance that only works
    # its own queues (`jobsup bench` runs one so).
    housekeeping: bool = True
    faults: str = ""
    log_level: str = "INFO"
    log_format: str = "text"
    # `jobsup start` gives the root logger jobsup's handler and level (when it has no handler
    # of its own), so what a job logs through `logging` is shown; false leaves it alone.
    log_root: bool = True
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9465  # 0: any free port (logged); -1: no HTTP endpoints
    # How long finished jobs are kept before maintenance deletes them.
    retain_succeeded: float = 7 * 86400.0
    retain_dead_lettered: float = 30 * 86400.0
    retain_cancelled: float = 7 * 86400.0
    # How long operator actions stay in the audit trail (`jobsup audit`).
    retain_audit: float = 90 * 86400.0
    # `jobsup dashboard` (`jobsup.web`): where it listens, and who may use it. Tokens are
    # ``ROLE:TOKEN`` and users ``NAME:ROLE:HASH`` (`jobsup dashboard hash-password`), comma
    # separated or TOML lists; ROLE is ``read`` or ``operator``. The secret signs login
    # sessions (a random one per process when empty: sessions end with the process).
    # `dashboard_secure_cookies`: users reach it over HTTPS (a TLS-terminating proxy), so its
    # cookies are marked Secure and its answers carry Strict-Transport-Security.
    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = 9466
    dashboard_tokens: str = ""
    dashboard_users: str = ""
    dashboard_secret: str = ""
    dashboard_secure_cookies: bool = False
    # Reverse proxies (addresses or networks, comma separated) whose X-Forwarded-For is
    # believed: the login limiter then counts failures per real client, not per proxy.
    dashboard_trusted_proxies: str = ""
    # Where the outbox's events go (`jobsup.events`): an amqp:// URL (RabbitMQ) or an
    # http(s):// webhook URL, signed with `events_secret`. Empty: no outbox at all.
    events_publisher: str = ""
    events_secret: str = ""
    events_timeout: float = 10.0  # seconds a publish may take (connect, confirm, answer)

    def __post_init__(self) -> None:
        if self.heartbeat <= 0 or 4 * self.heartbeat > self.lease:
            raise ConfigurationError(
                f"heartbeat ({self.heartbeat:g}s) must be at most a quarter of the lease ({self.lease:g}s): a job is "
                "cancelled when its lease would lapse within two heartbeats, and a renewal needs a heartbeat of slack"
            )
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ConfigurationError(f"log_level must be DEBUG, INFO, WARNING or ERROR, not {self.log_level!r}")
        if not -1 <= self.metrics_port <= 65535:
            raise ConfigurationError(f"metrics_port must be 0-65535 (or -1 for none), not {self.metrics_port}")
        if self.log_format not in ("text", "json"):
            raise ConfigurationError(f"log_format must be text or json, not {self.log_format!r}")
        if self.listen_url:
            from jobsup.store.dialects.pooler import check_listen_url

            check_listen_url(self.listen_url)
        if self.faults:
            from jobsup.store.faults import parse

            parse(self.faults)
        if self.poll_interval is not None and self.poll_interval <= 0:
            raise ConfigurationError(
                f"poll_interval ({self.poll_interval:g}s) would claim in a busy loop; give a duration above zero, "
                "or leave it out for the database's default"
            )
        if self.events_timeout <= 0:
            raise ConfigurationError(
                f"events_timeout ({self.events_timeout:g}s) must be above zero: it bounds each publish's answer"
            )
        if self.events_publisher:
            from jobsup.events.publishers import check

            check(self.events_publisher, self.events_secret)
        if self.claim_batch is not None and self.claim_batch < 1:
            raise ConfigurationError(f"claim_batch must be at least 1, not {self.claim_batch}")
        for queue, config in self.queues.items():
            check_name(queue, "queue")
            if config.workers < 1:
                raise ConfigurationError(f"queue {queue!r} needs at least 1 worker, not {config.workers}")
            if config.claim_batch is not None and config.claim_batch < 1:
                raise ConfigurationError(f"claim_batch of queue {queue!r} must be at least 1")
            if not 1 <= config.concurrency <= MAX_CONCURRENCY:
                raise ConfigurationError(
                    f"concurrency of queue {queue!r} must be 1-{MAX_CONCURRENCY} jobs at once per worker, "
                    f"not {config.concurrency}"
                )

    def claim_batch_of(self, queue: str) -> int | None:
        """The queue's claim batch, else the instance's; None: adaptive."""
        return self.queues[queue].claim_batch or self.claim_batch

    def timeout_of(self, queue: str) -> float | None:
        return self.queues[queue].timeout

    def concurrency_of(self, queue: str) -> int:
        return self.queues[queue].concurrency

    def merged(self, overrides: Mapping[str, Any]) -> Settings:
        """A copy with `overrides` applied (None values ignored), each value checked."""
        given = {key: value for key, value in overrides.items() if value is not None}
        return replace(self, **{key: _coerce(key, value) for key, value in given.items()})


def load(
    overrides: Mapping[str, Any] | None = None, *, directory: Path | None = None, config: Path | None = None
) -> Settings:
    """Settings from every source, later winning: defaults, the file (`config`, or
    ``$JOBSUP_CONFIG``, or ``jobsup.toml`` / ``[tool.jobsup]`` in ``pyproject.toml`` in
    `directory`), environment, `overrides`."""
    settings = Settings()
    given = config or (Path(os.environ["JOBSUP_CONFIG"]) if os.environ.get("JOBSUP_CONFIG") else None)
    settings = settings.merged(_from_config(given) if given is not None else _from_file(directory or Path.cwd()))
    settings = settings.merged(_from_environment(os.environ))
    return settings.merged(overrides or {})


def parse_queues(specs: Any) -> dict[str, QueueConfig]:
    """Queues from ``["default=2", "mail"]``, ``"default=2,mail=1"``, or a TOML table whose
    values are worker counts or tables (``{workers = 2, claim_batch = 10, timeout = "60s"}``)."""
    if isinstance(specs, Mapping):
        queues = {str(name): _queue_config(str(name), value) for name, value in specs.items()}
    else:
        if isinstance(specs, str):
            specs = [part for part in specs.split(",") if part.strip()]
        if not isinstance(specs, list | tuple):
            raise ConfigurationError(
                f'queues: {specs!r} is not a list of queues; use "default=2,mail=1", a list or a table'
            )
        queues = dict(_queue_spec(str(spec)) for spec in specs)
    if not queues:
        raise ConfigurationError("queues: none given; name at least one, e.g. default=2")
    return queues


def _queue_spec(spec: str) -> tuple[str, QueueConfig]:
    name, _, shape = (part.strip() for part in spec.partition("="))
    if not name:
        raise ConfigurationError(
            f"queues: {spec!r} has no queue name; use NAME=WORKERS[:CONCURRENCY], e.g. default=2 or mail=2:50"
        )
    count, _, concurrency = (part.strip() for part in shape.partition(":"))
    return name, QueueConfig(
        workers=_whole(count or "1", f"workers of queue {name!r}"),
        concurrency=_whole(concurrency or "1", f"concurrency of queue {name!r}"),
    )


def _queue_config(name: str, value: Any) -> QueueConfig:
    if isinstance(value, QueueConfig):
        return value
    if isinstance(value, str):
        return _queue_spec(f"{name}={value}")[1]  # "2:50", as --queue takes it
    if not isinstance(value, Mapping):
        return QueueConfig(workers=_whole(value, f"workers of queue {name!r}"))
    unknown = set(value) - {"workers", "claim_batch", "timeout", "concurrency"}
    if unknown:
        raise ConfigurationError(
            f"queue {name!r}: unknown keys {sorted(unknown)}; use workers, concurrency, claim_batch, timeout"
        )
    batch, timeout = value.get("claim_batch"), value.get("timeout")
    return QueueConfig(
        workers=_whole(value.get("workers", 1), f"workers of queue {name!r}"),
        concurrency=_whole(value.get("concurrency", 1), f"concurrency of queue {name!r}"),
        claim_batch=None if batch is None else _whole(batch, f"claim_batch of queue {name!r}"),
        timeout=None if timeout is None else parse_duration(timeout, what=f"timeout of queue {name!r}"),
    )


def _coerce(key: str, value: Any) -> Any:
    names = {f.name for f in fields(Settings)}
    if key not in names:
        raise ConfigurationError(f"unknown setting {key!r}; known settings: {', '.join(sorted(names))}")
    if key in _DURATIONS:
        return parse_duration(value, what=key)
    if key in ("dashboard_tokens", "dashboard_users", "dashboard_trusted_proxies") and isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    if key == "claim_batch":
        return _claim_batch(value, key)
    if key in ("metrics_port", "dashboard_port"):
        return _whole(value, key)
    if key == "queues":
        return parse_queues(value)
    if key == "apps":
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        if not isinstance(value, list | tuple) or not all(isinstance(app, str) for app in value):
            raise ConfigurationError(f'apps: {value!r} is not a list of module names; use "myapp.jobs,other"')
        return tuple(value)
    if key in ("migrate", "housekeeping", "dashboard_secure_cookies", "log_root"):
        return _flag(value, key)
    if key == "listen_url":
        # `listen_url = false` in TOML, or OFF, mean off too
        return "off" if value is False or str(value).strip().lower() == "off" else str(value).strip()
    return str(value)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _flag(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ConfigurationError(f"{what}: {value!r} is neither true nor false; use one of {', '.join(_TRUE + _FALSE)}")


def _claim_batch(value: Any, what: str) -> int | None:
    """A whole number, or "auto" for the adaptive claim (the default, said again to undo a
    file's number from the environment or the command line)."""
    if str(value).strip().lower() == "auto":
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigurationError(f'{what}: {value!r} is not a whole number or "auto"') from None


def _whole(value: Any, what: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigurationError(f"{what}: {value!r} is not a whole number") from None


def _from_file(directory: Path) -> dict[str, Any]:
    own, project = directory / "jobsup.toml", directory / "pyproject.toml"
    try:
        if own.exists():
            return dict(tomllib.loads(own.read_text()))
        if project.exists():
            return dict(tomllib.loads(project.read_text()).get("tool", {}).get("jobsup", {}))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{own if own.exists() else project} is not valid TOML: {exc}") from None
    return {}


def _from_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigurationError(f"config file {str(path)!r} does not exist")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{path} is not valid TOML: {exc}") from None
    return dict(data.get("tool", {}).get("jobsup", {})) if path.name == "pyproject.toml" else dict(data)


def _from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    prefix = "JOBSUP_"
    return {
        key[len(prefix) :].lower(): value
        for key, value in environ.items()
        # An empty variable (an env file's `JOBSUP_MIGRATE=`) counts as not set.
        if key.startswith(prefix) and value.strip() and key[len(prefix) :].lower() in {f.name for f in fields(Settings)}
    }
