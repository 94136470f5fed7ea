"""Sensitive parameters, sealed at rest (AES-GCM through `cryptography`).

A sensitive field's value is stored as ``{"$sealed": "v2:<key id>.<nonce and ciphertext>"}``:
its JSON encrypted under the newest key of ``JOBSUP_ENCRYPTION_KEYS`` with a fresh 96-bit
nonce, and as associated data what the value is for (`Binding`): the job's id and job type,
or the schedule's name, job type and row id, and the field's name. So a ciphertext copied
into another job or schedule, another field, or left in a row whose job type was changed,
does not open. The key's id is stored beside the ciphertext (and on the row, as `key_id`),
so keys rotate without rewriting old rows: a list holds the new key first and the old ones
after it, until `jobsup keys rotate` has re-sealed every row.

Envelopes written before the job type was bound (version 1: ``"<key id>.<...>"``, bound to
the id or name and the field only) still open, so old rows stay readable; `jobsup keys
rotate` re-seals them as version 2.

``JOBSUP_ENCRYPTION_KEYS`` is a comma-separated list of ``id:key``, newest first, each key
16, 24 or 32 bytes in URL-safe base64 (`jobsup keys generate` prints one). Only the worker
running a job opens its sealed values; every read path shows them as `MASK`.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jobsup.errors import ConfigurationError, JobsupError

ENV = "JOBSUP_ENCRYPTION_KEYS"
MARK = "$sealed"
MASK = "***"
_KEY_ID = re.compile(r"[A-Za-z0-9_\-]{1,64}")
V2 = "v2:"  # a version 2 envelope's prefix: ':' is in no key id, so a version 1 one never starts so
_NONCE = 12
_TAG = 16  # AES-GCM's authentication tag, after the ciphertext


class SealedParameterError(JobsupError):
    """A sensitive parameter could not be opened: that attempt fails, the worker goes on."""


def is_sealed(value: object) -> bool:
    return isinstance(value, dict) and len(value) == 1 and MARK in value


def mask(payload: Any, sensitive: frozenset[str] = frozenset()) -> Any:
    """`payload` with every sealed value, and the top-level values of `sensitive` (the
    fields its job type marks sensitive now, which rows written before may hold in clear),
    shown as `MASK`: what every read path shows."""
    if is_sealed(payload):
        return MASK
    if isinstance(payload, dict):
        return {key: MASK if key in sensitive else mask(item) for key, item in payload.items()}
    if isinstance(payload, list):
        return [mask(item) for item in payload]
    return payload


def has_sealed(payload: Any) -> bool:
    if not isinstance(payload, dict):
        return False
    for item in payload.values():  # noqa: SIM110 (a loop, not any() over a generator: a bulk enqueue asks per job)
        if is_sealed(item):
            return True
    return False


def clear_sensitive(payload: Any, sensitive: frozenset[str]) -> frozenset[str]:
    """The fields of `sensitive` that `payload` holds in clear (written before they were
    marked sensitive)."""
    if not isinstance(payload, dict):
        return frozenset()
    return frozenset(key for key in sensitive & payload.keys() if not is_sealed(payload[key]))


def sealed_fields(payload: Any) -> frozenset[str]:
    if not isinstance(payload, dict):
        return frozenset()
    return frozenset(key for key, value in payload.items() if is_sealed(value))


def has_v1(payload: Any) -> bool:
    """Whether `payload` holds a version 1 envelope (not bound to the job type)."""
    return isinstance(payload, dict) and any(
        is_sealed(value) and not str(value[MARK]).startswith(V2) for value in payload.values()
    )


@dataclass(frozen=True)
class Binding:
    """What a row's sealed values are for, as associated data: `current` for version 2
    envelopes, `legacy` (the id or name only) for version 1 ones; `what` names the row in
    messages."""

    what: str
    current: str
    legacy: str


def job_binding(job_id: int, job_type: str) -> Binding:
    return Binding(f"job {job_id}", f"job:{job_id}|type:{job_type}", f"job:{job_id}")


def schedule_binding(name: str, job_type: str, row_id: str | None) -> Binding:
    """A schedule's: its row id is new at every `add_recurring`, so a schedule removed and
    added again under the same name does not open the old one's ciphertexts."""
    return Binding(
        f"recurring schedule {name!r}", f"recurring:{name}|type:{job_type}|row:{row_id}", f"recurring:{name}"
    )


def new_row_id() -> str:
    return base64.urlsafe_b64encode(os.urandom(12)).decode()


@dataclass(frozen=True)
class Keyring:
    keys: tuple[tuple[str, bytes], ...] = field(repr=False)  # (id, key), newest first

    @property
    def newest(self) -> str:
        return self.keys[0][0]

    def sealed_length(self, payload: Mapping[str, Any], fields: frozenset[str], placeholder_text: str) -> int:
        """The length `placeholder_text` (`Sealing.placeholder`'s JSON) will have once
        sealed: a seal's length depends only on its value's, not on what it is bound to."""
        grown = 0
        for name in fields & payload.keys():
            plain = len(json.dumps(payload[name], separators=(",", ":"), ensure_ascii=False).encode())
            box = 4 * -(-(_NONCE + plain + _TAG) // 3)  # base64 of nonce, ciphertext and tag
            grown += len(V2) + len(self.newest) + 1 + box + 2 - len("null")
        return len(placeholder_text) + grown

    def seal(self, payload: Mapping[str, Any], fields: frozenset[str], binding: Binding) -> dict[str, Any]:
        """`payload` with the values of `fields` sealed under the newest key, bound to `binding`
        (always a version 2 envelope)."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key_id, key = self.keys[0]
        sealed = dict(payload)
        for name in fields & payload.keys():
            nonce = os.urandom(_NONCE)
            plain = json.dumps(payload[name], separators=(",", ":"), ensure_ascii=False).encode()
            box = AESGCM(key).encrypt(nonce, plain, _associated(binding.current, name, 2))
            sealed[name] = {MARK: f"{V2}{key_id}.{base64.urlsafe_b64encode(nonce + box).decode()}"}
        return sealed

    def unseal(self, payload: Mapping[str, Any], binding: Binding) -> dict[str, Any]:
        """`payload` with every sealed value opened, or `SealedParameterError` saying which
        field, which key, and what to do."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        opened = dict(payload)
        known = dict(self.keys)
        what = binding.what
        for name, value in payload.items():
            if not is_sealed(value):
                continue
            text = value[MARK] if isinstance(value[MARK], str) else ""
            version, associated = (2, binding.current) if text.startswith(V2) else (1, binding.legacy)
            key_id, _, box = text.removeprefix(V2).partition(".")
            if not box:
                raise SealedParameterError(f"{what}: field {name!r} holds no ciphertext (the row was altered)")
            key = known.get(key_id)
            if key is None:
                raise SealedParameterError(
                    f"{what}: field {name!r} is sealed with key {key_id!r}, which {ENV} does not hold "
                    f"(it holds {', '.join(map(repr, known))}): add that key after the newest one"
                )
            try:
                raw = base64.urlsafe_b64decode(box)
                plain = AESGCM(key).decrypt(raw[:_NONCE], raw[_NONCE:], _associated(associated, name, version))
            except (InvalidTag, ValueError):
                raise SealedParameterError(
                    f"{what}: field {name!r} does not open with key {key_id!r}: the key under that id is "
                    "not the one it was sealed with, or the ciphertext was altered, copied from another job "
                    "or schedule, or the row's job type was changed"
                ) from None
            opened[name] = json.loads(plain)
        return opened


@dataclass(frozen=True)
class Sealing:
    """A new job's sensitive values, sealed once the insert has given the job its id (the
    associated data): the row is first written with `placeholder` in their place, and
    rewritten in the same transaction, so a value is never written in clear."""

    payload: Mapping[str, Any] = field(repr=False)  # checked, in clear
    fields: frozenset[str]
    keyring: Keyring

    def placeholder(self) -> dict[str, Any]:
        return {key: {MARK: None} if key in self.fields else value for key, value in self.payload.items()}

    def seal(self, job_id: int, job_type: str) -> dict[str, Any]:
        return self.keyring.seal(self.payload, self.fields, job_binding(job_id, job_type))


def _associated(binding: str, field: str, version: int) -> bytes:
    return f"jobsup.v{version}|{binding}|{field}".encode()


def keyring() -> Keyring | None:
    """The keys of ``JOBSUP_ENCRYPTION_KEYS`` (None when unset), or `ConfigurationError`
    naming what is wrong with them."""
    text = os.environ.get(ENV, "").strip()
    return parse_keys(text) if text else None


def required_keyring(why: str = "this job has sensitive parameters") -> Keyring:
    found = keyring()
    if found is None:
        raise ConfigurationError(
            f"{why} and {ENV} is not set: set it to id:key "
            "(`jobsup keys generate` prints one) where jobs are enqueued and where they run"
        )
    return found


def check_key_id(key_id: str) -> str:
    if not _KEY_ID.fullmatch(key_id):
        raise ConfigurationError(f"key id {key_id!r} is not 1-64 letters, digits, _ or -")
    return key_id


@functools.lru_cache(maxsize=8)
def parse_keys(text: str) -> Keyring:
    keys: list[tuple[str, bytes]] = []
    for index, item in enumerate(part.strip() for part in text.split(",")):
        key_id, sep, encoded = item.partition(":")
        if not sep or not _KEY_ID.fullmatch(key_id):
            raise ConfigurationError(
                f"{ENV} entry {index + 1} is not id:key with an id of 1-64 letters, digits, _ or -"
            )
        try:
            key = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except ValueError:
            key = b""
        if len(key) not in (16, 24, 32):
            raise ConfigurationError(
                f"{ENV} key {key_id!r} is not 16, 24 or 32 bytes of URL-safe base64 "
                "(`jobsup keys generate` prints a good one)"
            )
        if any(key_id == seen for seen, _ in keys):
            raise ConfigurationError(f"{ENV} names key {key_id!r} twice")
        keys.append((key_id, key))
    return Keyring(tuple(keys))


def generate_key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
