"""Timers: deadline entries on one heap with lazy cancellation.

A timer is armed with a deadline and a callback. Cancelling or re-arming
only marks the old heap entry stale; stale entries are skipped when they
surface. ``run(now)`` fires everything due and returns the next deadline.

Stale entries are bounded: the heap counts its armed timers, and when it
holds more than twice as many entries as that (plus ``COMPACT_SLACK``) it is
rebuilt from the live ones. Without that, a flood that creates and discards
timed objects quickly (fragments evicted long before their 30 s timeout)
would keep every discarded timer, and what its callback holds, until the
deadline surfaced: hundreds of MB under a fragment flood over veth.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Optional

COMPACT_SLACK = 1024  # stale heap entries always tolerated before a rebuild is considered


class Timer:
    """One restartable timer. ``deadline`` is None when not armed.

    With an ``owner`` the callback is a plain function called as
    ``callback(owner, now)``: an owner with several timers (a TCP
    connection) then allocates no bound method per timer.
    """

    __slots__ = ("callback", "owner", "deadline", "_gen", "_wheel")

    def __init__(self, wheel: "TimerHeap", callback: Callable[..., None], owner=None):
        self._wheel = wheel
        self.callback = callback
        self.owner = owner
        self.deadline: Optional[float] = None
        self._gen = 0

    def arm(self, deadline: float) -> None:
        if self.deadline is None:
            self._wheel.live += 1
        self._gen += 1
        self.deadline = deadline
        self._wheel._push(deadline, self)

    def cancel(self) -> None:
        if self.deadline is not None:
            self._wheel.live -= 1
        self._gen += 1
        self.deadline = None


class _Unarmed:
    """The timer of an owner that creates its timers on first use (``UNARMED``): never armed."""

    __slots__ = ()
    deadline = None

    def cancel(self) -> None:
        pass


# Shared by every owner with a lazily created timer: reads ``deadline is None``, ``cancel()`` does nothing.
UNARMED = _Unarmed()


class TimerHeap:
    """All of a stack's timers: one heap, lazy deletion."""

    __slots__ = ("_heap", "_seq", "live")

    def __init__(self):
        self._heap: list = []
        self._seq = itertools.count()
        self.live = 0  # armed timers (each has exactly one current entry in the heap)

    def timer(self, callback: Callable[..., None], owner=None) -> Timer:
        """A new timer: ``callback(now)``, or ``callback(owner, now)`` when ``owner`` is given."""
        return Timer(self, callback, owner)

    def _push(self, deadline: float, timer: Timer) -> None:
        heap = self._heap
        heapq.heappush(heap, (deadline, next(self._seq), timer._gen, timer))
        if len(heap) > 2 * self.live + COMPACT_SLACK:
            self._compact()

    def _compact(self) -> None:
        """Rebuild the heap from its current entries only (amortized O(1) per push)."""
        live = [e for e in self._heap if e[2] == e[3]._gen and e[3].deadline == e[0]]
        heapq.heapify(live)
        self._heap = live

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
        while True:
            heap = self._heap  # a callback that arms a timer may have rebuilt it (_compact)
            if not heap or heap[0][0] > now:
                break
            deadline, _, gen, timer = heapq.heappop(heap)
            if gen != timer._gen or timer.deadline != deadline:
                continue
            timer.deadline = None
            self.live -= 1
            owner = timer.owner
            if owner is None:
                timer.callback(now)
            else:
                timer.callback(owner, now)
        return self.next_deadline()

    def __len__(self) -> int:
        return len(self._heap)
