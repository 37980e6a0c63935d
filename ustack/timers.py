"""Timers: deadline entries on one heap with lazy cancellation.

A timer is armed with a deadline and a callback. Cancelling or re-arming
only marks the old heap entry stale; stale entries are skipped when they
surface. ``run(now)`` fires everything due and returns the next deadline.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Optional


class Timer:
    """One restartable timer. ``deadline`` is None when not armed."""

    __slots__ = ("callback", "deadline", "_gen", "_wheel")

    def __init__(self, wheel: "TimerHeap", callback: Callable[[float], None]):
        self._wheel = wheel
        self.callback = callback
        self.deadline: Optional[float] = None
        self._gen = 0

    def arm(self, deadline: float) -> None:
        self._gen += 1
        self.deadline = deadline
        self._wheel._push(deadline, self)

    def cancel(self) -> None:
        self._gen += 1
        self.deadline = None


class TimerHeap:
    """All of a stack's timers: one heap, lazy deletion."""

    __slots__ = ("_heap", "_seq")

    def __init__(self):
        self._heap: list = []
        self._seq = itertools.count()

    def timer(self, callback: Callable[[float], None]) -> Timer:
        return Timer(self, callback)

    def _push(self, deadline: float, timer: Timer) -> None:
        heapq.heappush(self._heap, (deadline, next(self._seq), timer._gen, timer))

    def next_deadline(self) -> Optional[float]:
        heap = self._heap
        while heap:
            deadline, _, gen, timer = heap[0]
            if gen == timer._gen and timer.deadline == deadline:
                return deadline
            heapq.heappop(heap)
        return None

    def run(self, now: float) -> Optional[float]:
        """Fire every timer due at ``now``; return the next deadline (or None)."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, _, gen, timer = heapq.heappop(heap)
            if gen != timer._gen or timer.deadline != deadline:
                continue
            timer.deadline = None
            timer.callback(now)
        return self.next_deadline()

    def __len__(self) -> int:
        return len(self._heap)
