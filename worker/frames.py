"""A failed attempt's traceback as it is stored: frames of file, line and function.

What `traceback.format_exception` prints is for the worker's own log (`job.traceback`): its
source lines may hold literals, and it is not kept. The stored frames hold no source line, no
local and no argument value, so no payload value can reach the database through them; the
file and function names are scrubbed of the job's secrets all the same, as its error text is.
They are capped (`MAX_FRAMES`, the innermost kept; `MAX_CHARS` of JSON) so a deep recursion
stores a bounded row.
"""

from __future__ import annotations

import json
import os
import traceback

from jobsup.scrub import Secrets, scrub

MAX_FRAMES = 50
MAX_CHARS = 16 * 1024
_EXECUTE = os.path.join(os.path.dirname(__file__), "execute.py")  # where the worker calls a job's function


def stored_frames(exc: BaseException, secrets: Secrets) -> str | None:
    """The JSON text of `exc`'s frames, innermost last; None when it has none."""
    summary: list[traceback.FrameSummary] = list(traceback.extract_tb(exc.__traceback__))
    if summary and summary[0].filename == _EXECUTE:
        summary = summary[1:]  # the worker's own call of the job's function: the same in every traceback
    if not summary:
        return None
    frames = [
        {"file": scrub(frame.filename, secrets), "line": frame.lineno, "function": scrub(frame.name, secrets)}
        for frame in summary[-MAX_FRAMES:]
    ]
    text = json.dumps(frames)
    while len(text) > MAX_CHARS and len(frames) > 1:  # long paths: keep the innermost that fit
        frames = frames[len(frames) // 4 or 1 :]
        text = json.dumps(frames)
    return text if len(text) <= MAX_CHARS else None
