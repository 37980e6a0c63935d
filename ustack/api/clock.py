"""Clocks: time is an argument to the core. Adapters read a clock; the core never does.

``Stack.poll(now)`` takes the time in seconds (float). Tests drive a
``ManualClock``; programs use ``MonotonicClock``. Both are callables
returning seconds.
"""

from __future__ import annotations

import time


class MonotonicClock:
    """Wall-independent time for real programs (time.monotonic)."""

    __slots__ = ()

    def __call__(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to: deterministic tests, simulated minutes in microseconds."""

    __slots__ = ("now",)

    def __init__(self, start: float = 0.0):
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the clock forward.

        Args:
            seconds: how far, >= 0.

        Returns:
            The new time.

        Raises:
            ValueError: a negative step (a clock does not run backwards).
        """
        if seconds < 0:
            raise ValueError("a clock does not run backwards")
        self.now += seconds
        return self.now

    def set(self, when: float) -> float:
        """Move the clock to an absolute time.

        Args:
            when: the new time, not before the present one.

        Returns:
            The new time.

        Raises:
            ValueError: ``when`` is in the past.
        """
        if when < self.now:
            raise ValueError("a clock does not run backwards")
        self.now = float(when)
        return self.now
