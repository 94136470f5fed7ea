"""Parameter defaults made when the job is made: `report_date: str = jobsup.template("{slot:%Y-%m-%d}")`.

A template is text with fields from a fixed context, and nothing else:

- ``now``: when the job is enqueued (UTC);
- ``slot``: when it is due: a recurring job's slot (in its schedule's time zone), else its
  ``run_at``, else ``now``;
- ``name`` and ``queue``: the job's.

A field's format spec is that value's own: strftime's for the two instants (no spec: ISO
8601), str's for the names. Attribute and item access (``{now.__class__}``), conversions
(``!r``) and nested fields are refused, so a template evaluates no code, and an unknown
field is refused when the job is registered, not when a job is made.

The template is published with the job's definition (its parameter's JSON Schema carries
it under `KEY`), so a process without the workers' code fills it in at enqueue as the
registering one would; the value is stored with the job, like any default.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobsup.clock import host_clock
from jobsup.errors import BadInput

KEY = "x-jobsup-template"  # the JSON Schema keyword a templated parameter's default is published under
FIELDS = ("now", "slot", "name", "queue")
# A template may come from a definition row any process wrote: a spec like {name:>2000000000}
# would make each enqueue allocate gigabytes. A field's width, and what it renders, are capped.
MAX_WIDTH = 64
MAX_RENDERED = 1000
_WIDTH = re.compile(r"^(?:.?[<>=^])?[-+ ]?z?#?0?(\d+)")


@dataclass(frozen=True)
class Template:
    """A parameter's default, rendered for each job; see `template`."""

    text: str

    def __str__(self) -> str:
        return self.text


def template(text: str) -> Any:
    """A default evaluated when each job is made, from ``now``, ``slot``, ``name`` and
    ``queue``: ``jobsup.template("{slot:%Y-%m-%d}")``. `BadInput` names a field that is not
    one of them. Typed `Any` (it is a `Template`) so it stands as the default of a `str`
    field under a type checker, as a dataclass's `field()` does."""
    check(text)
    return Template(text)


@dataclass(frozen=True)
class Moment:
    """What a template is rendered from: the job being made."""

    now: datetime
    slot: datetime
    name: str
    queue: str

    @classmethod
    def of(cls, name: str, queue: str, *, now: datetime | None = None, slot: datetime | None = None) -> Moment:
        now = now or host_clock()
        return cls(now, slot or now, name, queue)


def check(text: object, *, where: str = "") -> None:
    """`BadInput` unless `text` is a template `render` can always fill in."""
    prefix = f"{where}: " if where else ""
    if not isinstance(text, str):
        raise BadInput(f"{prefix}a template is a string like '{{slot:%Y-%m-%d}}', not {type(text).__name__}")
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise BadInput(
            f"{prefix}template {text!r} cannot be read ({exc}); write a literal brace as {{{{ or }}}}"
        ) from None
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        if field not in FIELDS:
            raise BadInput(
                f"{prefix}template {text!r} names {{{field}}}, which is not one of "
                + ", ".join(f"{{{name}}}" for name in FIELDS)
            )
        if conversion is not None or "{" in (spec or ""):
            raise BadInput(f"{prefix}template {text!r}: a field takes a format spec only, like {{slot:%Y-%m-%d}}")
    try:  # a spec the value's type refuses ({name:%Y}) is refused now, not at every enqueue
        render(text, Moment.of("name", "queue"))
    except (ValueError, TypeError) as exc:
        raise BadInput(f"{prefix}template {text!r} cannot be rendered ({exc})") from None


def render(text: str, moment: Moment) -> str:
    """`text` with its fields filled in from `moment` (a template `check` passed)."""
    out = []
    for literal, field, spec, _ in string.Formatter().parse(text):
        out.append(literal)
        if field is None:
            continue
        if field not in FIELDS:  # `check` refuses it; never a getattr of a name a row chose
            raise BadInput(f"template {text!r} names {{{field}}}, which is not one of {', '.join(FIELDS)}")
        value = getattr(moment, field)
        if isinstance(value, datetime) and not spec:
            out.append(value.isoformat())
            continue
        width = _WIDTH.match(spec or "") if isinstance(value, str) else None
        if width is not None and int(width.group(1)) > MAX_WIDTH:
            raise BadInput(f"template {text!r}: a field is at most {MAX_WIDTH} characters wide")
        out.append(format(value, spec or ""))
    rendered = "".join(out)
    if len(rendered) > MAX_RENDERED:
        raise BadInput(f"template {text!r} renders {len(rendered)} characters; at most {MAX_RENDERED}")
    return rendered
