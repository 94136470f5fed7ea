"""Who an operator action is by: the actor written to the audit trail.

An action's actor is the one its caller names (the CLI's ``--actor``, a web app's signed-in
user); else `default_actor()`, the operating-system user of this process as ``os:<name>``,
so a row never lacks one. Names are free text of 1-200 characters.
"""

from __future__ import annotations

import getpass
import os

from jobsup.checks import check_text

UNKNOWN_USER = "os:unknown"


def default_actor() -> str:
    """``os:<user>`` for the user this process runs as; ``os:uid-<n>`` or ``os:unknown``
    where the system cannot name it (a container's uid without a passwd entry)."""
    try:
        name = getpass.getuser()
    except Exception:  # getpass raises OSError or KeyError, varying by platform and version
        name = f"uid-{os.getuid()}" if hasattr(os, "getuid") else ""
    return f"os:{name}"[:200] if name else UNKNOWN_USER


def actor_of(actor: str | None) -> str:
    """`actor` checked, or `default_actor()` when None."""
    return default_actor() if actor is None else check_text(actor, "actor")
