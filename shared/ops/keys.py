"""`jobsup keys generate|rotate`: the encryption keys of sensitive parameters.

Rotation is a deploy in three steps: put a new key first in ``JOBSUP_ENCRYPTION_KEYS``
(old ones after it) everywhere, run `jobsup keys rotate` to re-seal every row under it,
then drop the old keys. Until the last step every process opens rows of either key.
The same command re-seals version 1 envelopes (not bound to the job type), and seals the
values of fields marked sensitive after their rows were written in clear.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from jobsup.audit import actor_of
from jobsup.ops.options import Target, actor_option, json_option, with_target
from jobsup.ops.tables import emit_json
from jobsup.secrets import check_key_id, generate_key, required_keyring


@click.group()
def keys() -> None:
    """Encryption keys for sensitive parameters (JOBSUP_ENCRYPTION_KEYS)."""


@keys.command("generate")
@click.option("--id", "key_id", default="k1", show_default=True, help="The id stored beside its ciphertexts.")
def keys_generate(key_id: str) -> None:
    """Print a new 256-bit key as an entry of JOBSUP_ENCRYPTION_KEYS."""
    click.echo(f"{check_key_id(key_id)}:{generate_key()}")


@keys.command("rotate")
@actor_option
@json_option
@with_target
def keys_rotate(target: Target, actor: str | None, as_json: bool) -> None:
    """Re-seal every job and schedule sealed under an older key (or in an older envelope)
    with the newest one, and seal the clear values of parameters marked sensitive since
    their rows were written."""
    from jobsup.store.sealed import Rotation

    who = actor_of(actor)
    ring = required_keyring("keys rotate re-seals rows under the newest key")
    client = target.client()
    sealed = client.store.sealed
    rotation = Rotation()
    # As published (`jobsup start`, `definitions sync`): what this process registers may be older.
    sensitive = {name: t.sensitive for name, t in client.store.definitions.load().items() if t.sensitive}
    total = sealed.older_than_newest(ring)
    show = not as_json and sys.stderr.isatty()
    progress: Any = click.progressbar(length=total, label=f"re-sealing under {ring.newest}", file=sys.stderr)
    try:
        with progress if show else _Silent() as bar:
            after: int | None = 0
            while after is not None:
                done = rotation.resealed
                after = sealed.rotate_jobs(ring, after, rotation, sensitive)
                bar.update(rotation.resealed - done)
            sealed.rotate_schedules(ring, rotation, sensitive)
    except BaseException:  # the rows re-sealed before an error stopped it are recorded
        detail = {"key": ring.newest, "resealed": rotation.resealed, "sealed": rotation.sealed}
        client.audit.record(who, "keys.rotate", target=ring.newest, outcome="failed", detail=detail)
        raise
    # Rows an enqueuer still configured with the old key first wrote behind the cursor.
    left = sealed.older_than_newest(ring) - len(rotation.failed)
    summary = {
        "key": ring.newest,
        "resealed": rotation.resealed,
        "sealed": rotation.sealed,
        "failed": rotation.failed,
        "left": left,
    }
    outcome = "refused" if rotation.failed or left else "ok"
    detail = {
        "key": ring.newest,
        "resealed": rotation.resealed,
        "sealed": rotation.sealed,
        "not_resealed": len(rotation.failed),
    }
    client.audit.record(who, "keys.rotate", target=ring.newest, outcome=outcome, detail=detail)
    if as_json:
        emit_json(summary)
    else:
        click.echo(f"re-sealed {rotation.resealed} rows under key {ring.newest!r}")
        if rotation.sealed:
            click.echo(f"sealed the clear sensitive values of {rotation.sealed} rows written before they were marked")
        for why in rotation.failed.values():
            click.echo(f"not re-sealed: {why}", err=True)
        if left:
            click.echo(
                f"{left} rows were sealed under an older key while this ran: some process still has it first "
                "in JOBSUP_ENCRYPTION_KEYS; fix that, then run keys rotate again",
                err=True,
            )
    if rotation.failed or left:
        raise SystemExit(1)


class _Silent:
    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, steps: int) -> None:
        return None
