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

Re-arming a timer *later* than its heap entry pushes nothing (lazy
re-arm): the entry stays where it is, ``deadline`` holds the new time, and
when the old entry surfaces it is pushed again for ``deadline``. A TCP
sender re-arms its retransmission timer on every ACK (RFC 6298 5.3) and
RACK-TLP's probe timeout right after (RFC 8985 7.2): with this, a bulk
transfer pushes about one entry per timeout interval instead of two per
ACK. The timers still fire at their deadlines and in the same order as
if every arm had pushed: an entry is keyed (deadline, arming order), and a
re-pushed one gets the key of the latest arm.
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

    __slots__ = ("callback", "owner", "deadline", "_gen", "_wheel", "_at", "_order")

    def __init__(self, wheel: "TimerHeap", callback: Callable[..., None], owner=None):
        self._wheel = wheel
        self.callback = callback
        self.owner = owner
        self.deadline: Optional[float] = None
        self._gen = 0
        self._at = 0.0  # the deadline of the timer's current heap entry (while armed)
        self._order = 0  # the arming order of the latest arm (ties between equal deadlines)

    def arm(self, deadline: float) -> None:
        wheel = self._wheel
        order = next(wheel._seq)
        self._order = order
        if self.deadline is None:
            wheel.live += 1
        elif deadline >= self._at:
            self.deadline = deadline  # lazy: the entry at _at surfaces first and is pushed again for this
            return
        self._gen += 1
        self.deadline = deadline
        self._at = deadline
        wheel._push(deadline, order, self)

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

    def _push(self, deadline: float, order: int, timer: Timer) -> None:
        heap = self._heap
        heapq.heappush(heap, (deadline, order, timer._gen, timer))
        if len(heap) > 2 * self.live + COMPACT_SLACK:
            self._compact()

    def _compact(self) -> None:
        """Rebuild the heap from its current entries only (amortized O(1) per push)."""
        live = [e for e in self._heap if e[2] == e[3]._gen and e[3].deadline is not None]
        heapq.heapify(live)
        self._heap = live

    def next_deadline(self) -> Optional[float]:
        heap = self._heap
        while heap:
            deadline, order, gen, timer = heap[0]
            if gen == timer._gen and timer.deadline is not None:
                if order == timer._order:
                    return deadline
                # re-armed later since (lazy): the entry moves to the latest arm's key
                timer._at = timer.deadline
                heapq.heapreplace(heap, (timer.deadline, timer._order, gen, timer))
                continue
            heapq.heappop(heap)
        return None

    def run(self, now: float) -> Optional[float]:
        """Fire every timer due at ``now``; return the next deadline (or None)."""
        while True:
            heap = self._heap  # a callback that arms a timer may have rebuilt it (_compact)
            if not heap or heap[0][0] > now:
                break
            deadline, order, gen, timer = heapq.heappop(heap)
            if gen != timer._gen or timer.deadline is None:
                continue
            if order != timer._order:  # re-armed later since (lazy): pushed again with the latest arm's key
                timer._at = timer.deadline
                heapq.heappush(heap, (timer.deadline, timer._order, gen, timer))
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
