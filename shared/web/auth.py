"""Who is asking, and may they: bearer tokens, users with hashed passwords (HTTP Basic or
the login form's signed session cookie), two roles, CSRF tokens and a login rate limit.

There is no anonymous user. With neither tokens nor users configured the app makes a random
operator token for its process (`Auth.one_time_token`) and requires it: a connection's
address, and any header a client or proxy sends, cannot tell the host's own operator from
anyone a forwarder passes on.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from jobsup.errors import ConfigurationError

READ, OPERATOR = "read", "operator"
ROLES = (READ, OPERATOR)
SESSION_COOKIE, CSRF_COOKIE = "jobsup_session", "jobsup_csrf"
SESSION_SECONDS = 12 * 3600
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
# scrypt's cost, stored in each hash so it can be raised without breaking the hashes made
# before: 2**17 x 8 (OWASP's minimum for scrypt) is 128 MiB a check.
_SCRYPT = {"n": 2**17, "r": 8, "p": 1}
_LEGACY_SCRYPT = {"n": 2**14, "r": 8, "p": 1}  # "scrypt$SALT$DIGEST", the first format
_MAX_N = 2**20
# At most this many checks at once: each takes 128 MiB, and logins come before any
# authentication, so a burst of them must not be able to exhaust the host's memory.
_CHECKS = threading.BoundedSemaphore(2)
MIN_SECRET = 32
log = logging.getLogger("jobsup.web")


@dataclass(frozen=True)
class Identity:
    """The user of a request: `name` (the audit trail's actor is ``web:<name>``), `role`,
    and `by` (``bearer``, ``basic``, ``session``, ``host``)."""

    name: str
    role: str
    by: str

    @property
    def actor(self) -> str:
        return f"web:{self.name}"

    @property
    def may_act(self) -> bool:
        return self.role == OPERATOR


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """A password as the ``dashboard_users`` setting stores it:
    ``scrypt.N.R.P.SALT.DIGEST`` (salted, its cost in it). Dots, not the ``$`` of the
    older ``scrypt$...`` form (still read): a shell's double quotes, a ``.env`` file and
    Compose interpolate ``$32768``, so a pasted hash came out changed."""
    salt = salt or secrets.token_bytes(16)
    digest = _scrypt(password, salt, _SCRYPT)
    return ".".join(("scrypt", *(str(_SCRYPT[key]) for key in "nrp"), salt.hex(), digest.hex()))


def _parts(stored: str) -> list[str]:
    return stored.split("." if stored.startswith("scrypt.") else "$")


def is_hash(stored: str) -> bool:
    return stored.startswith(("scrypt.", "scrypt$"))


def check_password(password: str, stored: str) -> bool:
    try:
        kind, *cost, salt, digest = _parts(stored)
        if kind != "scrypt" or len(cost) not in (0, 3):
            return False
        params = dict(zip("nrp", map(int, cost), strict=True)) if cost else _LEGACY_SCRYPT
        if not 2 <= params["n"] <= _MAX_N or not 1 <= params["r"] <= 32 or not 1 <= params["p"] <= 16:
            return False
        found = _scrypt(password, bytes.fromhex(salt), params)
    except ValueError:
        return False
    return hmac.compare_digest(found.hex(), digest)


def below_cost(stored: str) -> bool:
    """Whether a stored hash was made at less than today's cost (or in the first format)."""
    cost = _parts(stored)[1:4]
    try:
        return len(cost) < 3 or [int(c) for c in cost] < [_SCRYPT["n"], _SCRYPT["r"], _SCRYPT["p"]]
    except ValueError:
        return False


def _scrypt(password: str, salt: bytes, params: dict[str, int]) -> bytes:
    memory = 128 * params["r"] * (params["n"] + params["p"] + 2)
    with _CHECKS:
        return hashlib.scrypt(password.encode(), salt=salt, maxmem=memory + 2**20, **params)


@dataclass
class Auth:
    """The configured credentials. `secret` signs sessions and CSRF tokens."""

    tokens: dict[str, str] = field(default_factory=dict)  # token -> role
    users: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (role, hash)
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    limiter: LoginLimiter = field(default_factory=lambda: LoginLimiter())
    rehashed: set[str] = field(default_factory=set)  # users whose new hash was logged

    @classmethod
    def parse(cls, tokens: str = "", users: str = "", secret: str = "") -> Auth:
        """From the ``dashboard_tokens`` / ``dashboard_users`` / ``dashboard_secret`` settings."""
        if secret and len(secret) < MIN_SECRET:
            raise ConfigurationError(
                f"dashboard_secret is {len(secret)} characters; give {MIN_SECRET} or more random ones "
                "(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        auth = cls() if not secret else cls(secret=secret.encode())
        for item in _items(tokens):
            role, _, token = item.partition(":")
            if role not in ROLES or len(token) < 16:
                raise ConfigurationError(
                    "dashboard_tokens: each is ROLE:TOKEN with ROLE read or operator and a token of 16+ characters"
                )
            auth.tokens[token] = role
        for item in _items(users):
            name, role, stored = [*item.split(":", 2), "", ""][:3]
            if not name or role not in ROLES or not is_hash(stored):
                raise ConfigurationError(
                    "dashboard_users: each is NAME:ROLE:HASH with ROLE read or operator and HASH from "
                    "`jobsup dashboard hash-password`"
                )
            auth.users[name] = (role, stored)
            if below_cost(stored):
                log.warning(
                    "dashboard user %s has a password hash below the current cost (scrypt N=%d): it is "
                    "rehashed at the user's next login and the new hash logged, to replace it in dashboard_users",
                    name,
                    _SCRYPT["n"],
                )
        return auth

    @property
    def open(self) -> bool:
        """No credentials configured (the app then needs a `one_time_token`)."""
        return not self.tokens and not self.users

    def one_time_token(self) -> str:
        """A random operator token, valid for this process's life only: what an app with no
        credentials configured requires (printed or logged once, as Jupyter does)."""
        token = secrets.token_urlsafe(32)
        self.tokens[token] = OPERATOR
        return token

    def bearer(self, token: str) -> Identity | None:
        for known, role in self.tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return Identity(token_name(known), role, "bearer")
        return None

    def password(self, name: str, password: str, by: str) -> Identity | None:
        role, stored = self.users.get(name, (READ, _NO_USER))
        ok = check_password(password, stored)  # run for unknown names too: same time taken
        if not ok or name not in self.users:
            return None
        if below_cost(stored) and name not in self.rehashed:
            # The hash lives in the settings, which jobsup does not write: the login is the
            # one moment the password is at hand, so hash it again now and hand it over.
            self.rehashed.add(name)
            log.warning(
                "dashboard user %s logged in with a password hash below the current cost; replace it in "
                "dashboard_users with %s",
                name,
                hash_password(password),
            )
        return Identity(name, role, by)

    def basic(self, header_value: str) -> Identity | None:
        credentials = basic_credentials(header_value)
        return None if credentials is None else self.password(*credentials, "basic")

    # -- sessions and CSRF --------------------------------------------------------------

    def session_cookie(self, who: Identity, *, now: float | None = None) -> tuple[str, str]:
        """A new session of `who`: its cookie, and its random id (which the server keeps
        while the session lasts, `jobsup.store.websessions`)."""
        expires = int((now or time.time()) + SESSION_SECONDS)
        session_id = secrets.token_urlsafe(24)
        text = f"{who.name}\n{who.role}\n{expires}\n{self._credential_mark(who.name)}\n{session_id}"
        body = base64.urlsafe_b64encode(text.encode()).decode()
        return f"{body}.{self.sign('session', body)}", session_id

    def session(self, cookie: str, *, now: float | None = None) -> tuple[Identity, str] | None:
        """The user of a session cookie and the session's id, if the cookie is ours, not
        expired, and its user (or token) still as it was; whether the session has ended is
        the server's to say (`jobsup.web.sessions`)."""
        body, _, signature = cookie.partition(".")
        if not self.verify("session", body, signature):
            return None
        try:
            name, role, expires, mark, session_id = base64.urlsafe_b64decode(body).decode().split("\n")
            live = int(expires) > (now or time.time())
        except ValueError:
            return None
        # A user (or token) removed from the configuration, given another role or a new
        # password (its hash changed) loses the session.
        if not live or self._credential(name)[0] != role:
            return None
        if not hmac.compare_digest(mark.encode(), self._credential_mark(name).encode()):
            return None
        return Identity(name, role, "session"), session_id

    def _credential_mark(self, name: str) -> str:
        """A short keyed digest of the user's stored hash (or the token a session was opened
        with): it changes with the password."""
        return self.sign("credential", self._credential(name)[1])[:16]

    def _credential(self, name: str) -> tuple[str, str]:
        """The role and stored secret behind `name`, a user's or a token's (``("", "")``: none)."""
        if name in self.users:
            return self.users[name]
        for token, role in self.tokens.items():
            if token_name(token) == name:
                return role, token
        return "", ""

    def csrf_token(self, nonce: str) -> str:
        """The form field that goes with the CSRF cookie `nonce` (a signed double submit)."""
        return self.sign("csrf", nonce)

    def csrf_ok(self, cookie: str | None, submitted: str | None) -> bool:
        if not cookie or not submitted:
            return False
        return self.verify("csrf", cookie, submitted)

    def sign(self, purpose: str, text: str) -> str:
        """An HMAC of `text` for one `purpose` (sessions, CSRF, a page's message): a
        signature made for one purpose never verifies for another."""
        return hmac.new(self.secret, f"{purpose}:{text}".encode(), hashlib.sha256).hexdigest()

    def verify(self, purpose: str, text: str, signature: str | None) -> bool:
        return bool(signature) and hmac.compare_digest(self.sign(purpose, text).encode(), str(signature).encode())


class LoginLimiter:
    """At most `attempts` failed logins per client address and per user name in `window`
    seconds; past that, login is refused (429) until the oldest failure ages out."""

    def __init__(self, attempts: int = 5, window: float = 300.0) -> None:
        self.attempts, self.window = attempts, window
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def blocked(self, *keys: str, now: float | None = None) -> float:
        """Seconds until a login for `keys` may be tried again (0: now)."""
        clock = time.monotonic() if now is None else now
        with self._lock:
            return self._wait(keys, clock)

    def failed(self, *keys: str, now: float | None = None) -> None:
        clock = time.monotonic() if now is None else now
        with self._lock:
            self._record(keys, clock)

    def reserve(self, *keys: str, now: float | None = None) -> tuple[float, float]:
        """Before checking a password: (seconds to wait, 0) if `keys` are blocked, else
        (0, stamp) with the attempt already counted as a failure, so that concurrent wrong
        logins cannot all pass the check first; `release` it when the login succeeds."""
        clock = time.monotonic() if now is None else now
        with self._lock:
            wait = self._wait(keys, clock)
            if not wait:
                self._record(keys, clock)
        return wait, clock

    def release(self, *keys: str, stamp: float) -> None:
        """Forget the attempt `reserve` counted at `stamp` (the login succeeded)."""
        with self._lock:
            for key in keys:
                failures = self._failures.get(key)
                if failures is not None and stamp in failures:
                    failures.remove(stamp)

    def _wait(self, keys: tuple[str, ...], clock: float) -> float:
        wait = 0.0
        for key in keys:
            failures = self._failures.get(key)
            while failures and failures[0] <= clock - self.window:
                failures.popleft()
            if failures and len(failures) >= self.attempts:
                wait = max(wait, failures[0] + self.window - clock)
        return wait

    def _record(self, keys: tuple[str, ...], clock: float) -> None:
        for key in keys:
            self._failures.setdefault(key, deque(maxlen=self.attempts * 4)).append(clock)
        if len(self._failures) > 10_000:  # a flood of names: forget the quiet ones
            for key in [k for k, v in self._failures.items() if not v or v[-1] <= clock - self.window]:
                del self._failures[key]


def token_name(token: str) -> str:
    """The user name of a bearer token (the audit trail's ``web:token-...``): a short digest,
    never the token."""
    return f"token-{hashlib.sha256(token.encode()).hexdigest()[:8]}"


def basic_credentials(header_value: str) -> tuple[str, str] | None:
    """The user name and password of a Basic Authorization header's value (None: malformed)."""
    try:
        name, _, password = base64.b64decode(header_value, validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return name[:200], password[:1000]


def _items(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


_NO_USER = hash_password(secrets.token_hex(8))  # checked for unknown names, so they take as long
