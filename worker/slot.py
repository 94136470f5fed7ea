"""A worker's slot: a few words of memory the worker writes and its supervisor reads.

The supervisor maps one shared anonymous region before it forks anything; each worker slot
(``default#1``) owns a fixed part of it, reused by the worker that replaces a dead one. The
worker records that it booted, when its leases were last known good (a claim or a renewal,
on the monotonic clock, which every process of a host shares), and which jobs it is running
right now (job id, attempt, timeout, and how its attempt ends should the worker end
itself now). A job stays "running" here until its outcome is written, or, for a success or
a release, handed to the settler: a worker that dies before writing a failure is charged
for it (a job running beside one the worker ended itself for is released instead).

The supervisor uses this for what the worker's own interpreter may fail to do: it kills a
worker whose renewal is overdue (a job holding the GIL starves the lease threads), and when
it buries a dead worker it knows which of its leases were running jobs (their attempt ends
as the exit says, or as the entry says when the worker ended itself: see `ending`) and
which were jobs that never started (released, the attempt not used).

Every field is one aligned 8-byte word written with a single store, so a reader never sees
half of one. A running entry is written job id and timeout first and attempt last; attempt 0
marks a free entry (real attempts start at 1).
"""

from __future__ import annotations

import math
import mmap

_HEADER = 3  # words: booted, renewed_at, capacity
_ENTRY = 4  # words: job id, attempt, timeout (NaN: none), how it ends (an exit code; 0: as the exit says)
_WORD = 8


class Slot:
    """One worker's view (or its supervisor's) of its slot."""

    def __init__(self, memory: memoryview, capacity: int) -> None:
        self._ints = memory.cast("q")
        self._floats = memory.cast("d")
        self.capacity = capacity

    # -- the worker writes -----------------------------------------------------------------

    def reset(self) -> None:
        self._ints[0:_HEADER] = _zeros(_HEADER)
        self._ints[2] = self.capacity
        self._ints[_HEADER : _HEADER + _ENTRY * self.capacity] = _zeros(_ENTRY * self.capacity)

    def mark_booted(self) -> None:
        self._ints[0] = 1

    def renewed(self, at: float) -> None:
        """Leases known good as of the monotonic instant `at`."""
        self._floats[1] = at

    def start(self, job_id: int, attempt: int, timeout: float | None) -> None:
        for entry in range(self.capacity):
            base = _HEADER + _ENTRY * entry
            if self._ints[base + 1] == 0:
                self._ints[base] = job_id
                self._floats[base + 2] = math.nan if timeout is None else timeout
                self._ints[base + 3] = 0
                self._ints[base + 1] = attempt
                return
        raise RuntimeError("more jobs running than the worker's slot can hold")

    def ending(self, job_id: int, code: int) -> None:
        """Should this process die now, `job_id`'s attempt ends as exit `code` would say
        (a worker running several jobs that ends itself for one of them)."""
        for entry in range(self.capacity):
            base = _HEADER + _ENTRY * entry
            if self._ints[base + 1] != 0 and self._ints[base] == job_id:
                self._ints[base + 3] = code
                return

    def finish(self, job_id: int) -> None:
        for entry in range(self.capacity):
            base = _HEADER + _ENTRY * entry
            if self._ints[base + 1] != 0 and self._ints[base] == job_id:
                self._ints[base + 1] = 0
                return

    # -- the supervisor reads --------------------------------------------------------------

    @property
    def booted(self) -> bool:
        return self._ints[0] == 1

    @property
    def renewed_at(self) -> float:
        return float(self._floats[1])

    def running(self) -> dict[int, int]:
        """The jobs running now: job id -> attempt."""
        return {job_id: attempt for job_id, attempt, _, _ in self.entries()}

    def entries(self) -> list[tuple[int, int, float | None, int]]:
        """The jobs running now: (job id, attempt, timeout, how it ends: 0 or an exit code)."""
        found = []
        for entry in range(self.capacity):
            base = _HEADER + _ENTRY * entry
            attempt = self._ints[base + 1]
            if attempt != 0:
                timeout = float(self._floats[base + 2])
                ends = int(self._ints[base + 3])
                found.append((int(self._ints[base]), int(attempt), None if math.isnan(timeout) else timeout, ends))
        return found


class SlotTable:
    """The supervisor's shared region: `count` slots of `capacity` running entries each."""

    def __init__(self, count: int, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.size = (_HEADER + _ENTRY * self.capacity) * _WORD
        self._memory = mmap.mmap(-1, max(1, count) * self.size)  # anonymous and shared: inherited by fork
        self._view = memoryview(self._memory)

    def slot(self, index: int) -> Slot:
        return Slot(self._view[index * self.size : (index + 1) * self.size], self.capacity)


def _zeros(count: int) -> memoryview:
    return memoryview(bytes(count * _WORD)).cast("q")
