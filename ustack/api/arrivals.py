"""Arrival prediction: wake up just before the next request of a steady, spaced flow.

A stack that sleeps between requests pays a wake-up per request: the
device's fd becomes readable, the kernel wakes the sleeping thread (on a VM
whose idle vCPU halts, that is an exit to the host and back: tens of µs,
FACTS.md), and the interpreter then runs with cold caches. The busy-poll
budget (``Driver.busy_poll``, like Linux's SO_BUSY_POLL) only helps when the
next frame comes within the budget; a client that sends a request every
10 ms finds the stack asleep every time.

Many spaced flows are periodic: pings, heartbeats, metric scrapes, game
ticks, a client pacing its requests. ``ArrivalPredictor`` watches the
*first* frame after each idle gap (``received``) and, once the gaps between them agree (the first 3, then
all but two of the last ``history``), predicts the next one on that
lattice.
The driver then sleeps until ``lead`` seconds before that instant (a timed
sleep wakes the CPU before the frame arrives, not after) and spins on the
ring until ``lag`` after it; the frame is then seen within a spin round.

The window widens (within that share) when recent arrivals strayed
further from their predicted instants than ``lead``/``lag``. A timed
sleep itself ends late (the timer's slack, the vCPU's exit from
halt): the driver reports each such lateness (``woke_late``) and the window
opens that much earlier (``wake_latency``, a moving average).

The CPU this costs is bounded by ``max_share`` of the period: the window
(``lead + lag``, 150 + 150 µs by default: 3% of 10 ms) must fit in it, or
nothing is predicted, and the early start for the timer's lateness is cut
to what is left of it (a late timer costs no CPU; a prompt one spins that
much longer). A flow that stops
costs at most ``MAX_MISSES`` windows before the predictor gives up; an idle
stack predicts nothing and sleeps (~0% CPU). Aperiodic traffic (gaps that
disagree by more than ``tolerance``) predicts nothing either.
"""

from __future__ import annotations

import collections
from typing import Optional

DEFAULT_LEAD = 150e-6  # wake this long before a predicted arrival (a timed wake-up's own latency)
DEFAULT_LAG = 150e-6  # and spin until this long after it
INITIAL_WAKE_LATENCY = 50e-6  # a timed sleep's lateness until the first is measured
MAX_WAKE_LATENCY = 1e-3  # a lateness estimate is capped here (a descheduled thread is not the timer's fault)
DEFAULT_MAX_SHARE = 0.05  # of each period, at most this share spent spinning (else no prediction)
MIN_GAP = 1e-3  # a frame after at least this much quiet starts a new "arrival"; closer ones are one burst
MAX_PERIOD = 1.0  # slower flows are left to sleep (the wake-up is small next to the period)
MAX_MISSES = 3  # predicted windows in a row without an arrival before predicting stops
HISTORY = 6  # gaps looked at: all but two must agree (a late arrival spoils two)
MIN_GAPS = 3  # a first prediction after this many gaps, when they all agree
ERRORS = 8  # recent arrivals' offsets from their predicted instants that size the window
ERROR_MARGIN = 50e-6  # the window reaches this far beyond the (second) largest recent offset


class ArrivalPredictor:
    """Learns the period of a spaced flow from its arrivals; ``window(now)`` is when to spin next.

    ``tolerance``: how far (fraction of the period, at least ``lead``) a gap
    may stray from the median of the last ``history`` and still agree.
    """

    __slots__ = ("lead", "lag", "max_share", "tolerance", "history", "wake_latency", "_last_rx", "_arrivals",
                 "_errors", "_shape")

    def __init__(self, *, lead: float = DEFAULT_LEAD, lag: float = DEFAULT_LAG,
                 max_share: float = DEFAULT_MAX_SHARE, tolerance: float = 0.15, history: int = HISTORY):
        for name, value in (("lead", lead), ("lag", lag), ("max_share", max_share), ("tolerance", tolerance)):
            if not value >= 0:
                raise ValueError(f"{name} must be a number >= 0, not {value!r}")
        if history < 2:
            raise ValueError("history must be at least 2 gaps")
        self.lead = lead
        self.lag = lag
        self.max_share = max_share
        self.tolerance = tolerance
        self.history = history
        self.wake_latency = INITIAL_WAKE_LATENCY
        self._last_rx: Optional[float] = None  # the last round that received frames
        self._arrivals: collections.deque = collections.deque(maxlen=history + 1)
        self._errors: collections.deque = collections.deque(maxlen=ERRORS)  # arrival - predicted instant
        self._shape = None  # (period, anchor, lead, lag) or False (no prediction), until the next arrival

    def received(self, now: float) -> Optional[bool]:
        """A round that started at ``now`` received frames. For the first frame after a gap (an
        arrival): whether it came inside the window predicted for it (None: none was predicted)."""
        last = self._last_rx
        self._last_rx = now
        if last is not None and now - last < MIN_GAP:
            return None
        predicted = self._next(now) if len(self._arrivals) > MIN_GAPS else None
        self._arrivals.append(now)
        self._shape = None
        if predicted is None:
            return None
        at, lead, lag, period = predicted
        if abs(now - at) < period / 2:
            self._errors.append(now - at)
        return at - lead - self._early(period, lead, lag) <= now

    def _lattice(self) -> Optional[tuple[float, float]]:
        """``(period, anchor)`` when most recent gaps agree, else None.

        The period is the median gap; a gap agrees when within ``tolerance`` of
        it. From ``MIN_GAPS`` gaps on, all must agree; once ``history`` are seen,
        all but two (one late arrival spoils two: a long gap, then a short one).
        The anchor is the
        lattice point nearest the last arrival, as the median of what the last
        three arrivals each say it is (each plus whole periods): one late
        arrival does not shift the predictions after it.
        """
        arrivals = self._arrivals
        if len(arrivals) <= MIN_GAPS:
            return None
        times = list(arrivals)
        gaps = [b - a for a, b in zip(times, times[1:])]
        ordered = sorted(gaps)
        mid = len(ordered) // 2
        period = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        if not MIN_GAP <= period <= MAX_PERIOD:
            return None
        if self.lead + self.lag > self.max_share * period:
            return None
        slack = max(self.tolerance * period, self.lead)
        agree = sum(abs(g - period) <= slack for g in gaps)
        if agree < (len(gaps) if len(gaps) < self.history else len(gaps) - 2):
            return None
        last = times[-1]
        guesses = sorted(t + round((last - t) / period) * period for t in times[-3:])
        return period, guesses[1]

    def period(self) -> Optional[float]:
        """The flow's period when its recent gaps agree, else None."""
        lattice = self._lattice()
        return None if lattice is None else lattice[0]

    def woke_late(self, late: float) -> None:
        """A timed sleep toward a window ended ``late`` seconds after its deadline (>= 0)."""
        late = min(max(late, 0.0), MAX_WAKE_LATENCY)
        self.wake_latency += (late - self.wake_latency) / 4

    def window(self, now: float) -> Optional[tuple[float, float]]:
        """``(start, end)``: spin from ``start`` to ``end`` for the next predicted arrival (the first
        window that has not ended by ``now``), or None: no steady flow, or it stopped. A sleep until
        ``start`` ends about ``lead`` before the arrival, ``wake_latency`` included."""
        predicted = self._next(now)
        if predicted is None:
            return None
        at, lead, lag, period = predicted
        return at - lead - self._early(period, lead, lag), at + lag

    def _next(self, now: float) -> Optional[tuple[float, float, float, float]]:
        """``(instant, lead, lag, period)`` of the next predicted arrival whose window has not ended."""
        shape = self._shape
        if shape is None:  # worked out once per arrival: the driver asks before every sleep
            lattice = self._lattice()
            shape = self._shape = False if lattice is None else lattice + self._spread(lattice[0])
        if shape is False:
            return None
        period, anchor, lead, lag = shape
        for k in range(1, MAX_MISSES + 1):  # the lattice points after the last arrival's
            at = anchor + k * period
            if at + lag > now:
                return at, lead, lag, period
        return None

    def _early(self, period: float, lead: float, lag: float) -> float:
        """How much before ``lead`` to end the sleep: the timer's lateness, within what ``max_share`` leaves."""
        return min(self.wake_latency, max(0.0, self.max_share * period - lead - lag))

    def _spread(self, period: float) -> tuple[float, float]:
        """The window around a predicted instant: ``lead``/``lag`` at least, wider when recent arrivals
        strayed further (the second largest offset each way, so one outlier does not widen it), within
        ``max_share`` of the period."""
        lead, lag = self.lead, self.lag
        errors = self._errors
        if len(errors) >= 3:
            ordered = sorted(errors)
            lead = max(lead, -ordered[1] + ERROR_MARGIN)
            lag = max(lag, ordered[-2] + ERROR_MARGIN)
            room = self.max_share * period
            lead = min(lead, max(self.lead, room / 2))
            lag = min(lag, max(self.lag, room - lead))
        return lead, lag
