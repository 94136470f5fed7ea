"""A worker's slot: a few words of shared memory the worker writes (booted, leases last good,
the jobs it runs, when each was claimed and how each ends) and its supervisor reads. What it
is for and how it is written safely: docs/internals.md, "A worker's slot".
"""

from __future__ import annotations

import math
import mmap

_HEADER = 3  # words: booted, renewed_at, capacity
# words: job id, attempt, timeout (NaN: none), how it ends (an exit code; 0: as the exit says),
# when its own claim set its lease
_ENTRY = 5
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

    def start(self, job_id: int, attempt: int, timeout: float | None, claimed_at: float) -> None:
        for entry in range(self.capacity):
            base = _HEADER + _ENTRY * entry
            if self._ints[base + 1] == 0:
                self._ints[base] = job_id
                self._floats[base + 2] = math.nan if timeout is None else timeout
                self._ints[base + 3] = 0
                self._floats[base + 4] = claimed_at
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

    def leases(self) -> list[float]:
        """For each job running now, since when (monotonic) its lease is known good: the later
        of the last renewal and its own claim."""
        renewed, found = float(self._floats[1]), []
        for entry in range(self.capacity):
            base = _HEADER + _ENTRY * entry
            if self._ints[base + 1] != 0:
                found.append(max(renewed, float(self._floats[base + 4])))
        return found

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
