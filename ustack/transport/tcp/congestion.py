"""Congestion control: the ``CongestionControl`` protocol, NewReno (RFC 5681) and CUBIC (RFC 9438).

A controller owns the congestion window (``window``, cwnd) and the
slow-start threshold (``ssthresh``), and changes them only on the events the
sender reports:

- ``on_ack(acked, rtt, now)``: SND.UNA advanced by ``acked`` data bytes
  outside loss recovery: slow start or congestion avoidance (growth).
  ``rtt`` is the smoothed RTT (seconds, None before the first sample).
- ``on_congestion(in_flight, now)``: loss recovery starts (RFC 5681 3.2
  step 2, RFC 6675 5 step 4): multiplicative decrease of ssthresh from
  FlightSize, cwnd = ssthresh.
- ``on_recovery_end(in_flight, now)``: loss recovery ended with a full
  acknowledgment: cwnd = min(ssthresh, max(FlightSize, SMSS) + SMSS)
  (RFC 6582 3.2 step 3, option 1); growth resumes on the next ACK.
- ``end_reduction(now)``: a recovery whose sending PRR paced ended: cwnd =
  ssthresh (RFC 9937, PRR: the flight was brought down to ssthresh; the
  FlightSize left when a full ACK arrives says nothing of the path, and a
  receiver that ACKs a whole flight at once leaves none).
- ``on_rto(in_flight, now)``: the retransmission timer expired: ssthresh
  from FlightSize, cwnd = the loss window (one SMSS, RFC 5681 3.1).
- ``set_mss(mss)``: the handshake fixed SMSS; ``lower_mss(mss)``: path MTU
  discovery shrank it (RFC 1191).
- ``snapshot()`` / ``restore(snap)``: loss recovery keeps the state from
  before a reduction and puts it back when the reduction proves spurious
  (D-SACK, RFC 3708; timestamps, RFC 3522; F-RTO, RFC 5682).

Loss recovery (duplicate ACKs, NewReno's window inflation, SACK's pipe) is
not here: see ``ustack.transport.tcp.recovery``, which calls
``on_congestion`` and ``on_recovery_end``. ``make(name, mss, cwnd=None,
ssthresh=None)`` builds a controller by name ("newreno", "reno", "cubic",
"bbr") from public values only, which is also how a live connection
switches algorithm. CUBIC is the default (``TcpConfig.congestion``), as in
Linux; the C pure-ACK path (``_fp_tx.pxi``) mirrors NewReno's and CUBIC's
growth.

A model-based controller (BBR, ``bbr``) sets ``paces``: the sender then
keeps a delivery rate sampler (``ratesample``) and a pacer (``pacing``),
calls ``on_rate_sample(sampler, pipe, recovering, srtt, now)`` on every ACK
(in loss recovery too) and sends new data no faster than ``pacing_rate``
in bursts of at most ``quantum`` bytes; such a connection's ACKs and
transmissions take the Python path (the C path handles NewReno and CUBIC).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Protocol

from ustack.transport.tcp.bbr import Bbr
from ustack.transport.tcp.window import INFINITE_SSTHRESH, Window, initial_window

__all__ = ["INFINITE_SSTHRESH", "Window", "initial_window", "slow_start", "recovery_exit_window", "CongestionControl",
           "NewReno", "Cubic", "Bbr", "ALGORITHMS", "make"]

def slow_start(cwnd: int, acked: int, ssthresh: int) -> int:
    """The window after an ACK of ``acked`` new bytes in slow start: every byte counts, up to ssthresh.

    RFC 5681 equation (2) caps the growth at SMSS per ACK, RFC 3465 (ABC) at
    L = 2 SMSS; Linux (tcp_slow_start) counts every segment acknowledged, so
    a stretch ACK (one ACK for a receiver's whole poll round, as ustack's own
    receive ACK coalescing sends, or for a GRO'd aggregate) grows the window
    as the per-segment ACKs it replaces would have. Growth stops at ssthresh,
    where congestion avoidance takes over.
    """
    grown = cwnd + acked
    return grown if grown < ssthresh else max(ssthresh, cwnd)


def recovery_exit_window(ssthresh: int, in_flight: int, mss: int) -> int:
    """RFC 6582 3.2 step 3, option (1): the window after a full acknowledgment ends recovery."""
    return min(ssthresh, max(in_flight, mss) + mss)


class CongestionControl(Protocol):
    """What the sender asks of a congestion control algorithm (see the module docstring)."""

    name: str  # the algorithm's name, as the ``congestion`` knob spells it
    mss: int  # SMSS in bytes
    ssthresh: int  # slow-start threshold in bytes

    @property
    def window(self) -> int:
        """cwnd in bytes."""

    def set_mss(self, mss: int) -> None:
        """The handshake fixed SMSS; a window that has not moved yet becomes IW for it (RFC 5681 3.1)."""

    def lower_mss(self, mss: int) -> None:
        """Path MTU discovery lowered SMSS (RFC 1191): later changes use it, the window is kept."""

    def on_ack(self, acked: int, rtt: float | None, now: float) -> None:
        """``acked`` new data bytes were acknowledged outside loss recovery: grow the window."""

    def on_congestion(self, in_flight: int, now: float) -> None:
        """Loss recovery starts: ssthresh from FlightSize ``in_flight``, cwnd = ssthresh."""

    def on_recovery_end(self, in_flight: int, now: float) -> None:
        """A full acknowledgment ended loss recovery (RFC 6582 3.2 step 3)."""

    def end_reduction(self, now: float) -> None:
        """A recovery paced by PRR ended: cwnd = ssthresh (RFC 9937)."""

    def on_rto(self, in_flight: int, now: float) -> None:
        """The retransmission timer expired: ssthresh from FlightSize, cwnd = one SMSS."""

    def snapshot(self) -> tuple:
        """The state a reduction changes."""

    def restore(self, snap: tuple) -> None:
        """Undo a spurious reduction."""


class NewReno(Window):
    """RFC 5681 slow start and congestion avoidance (the window part of NewReno; recovery is apart)."""

    name = "newreno"
    __slots__ = ("bytes_acked",)

    def __init__(self, mss: int, cwnd: int | None = None, ssthresh: int | None = None):
        super().__init__(mss, cwnd, ssthresh)
        self.bytes_acked = 0  # 3.1 congestion avoidance: bytes acknowledged since the last increase

    def on_ack(self, acked: int, rtt: float | None, now: float) -> None:
        mss = self.mss
        if self.cwnd < self.ssthresh:
            self.cwnd = slow_start(self.cwnd, acked, self.ssthresh)
            return
        # congestion avoidance, RFC 5681 3.1: +SMSS once per cwnd of bytes acknowledged
        self.bytes_acked += acked
        if self.bytes_acked >= self.cwnd:
            self.bytes_acked -= self.cwnd
            self.cwnd += mss

    def _reduce(self, in_flight: int) -> None:
        # RFC 5681 equation (4)
        self.ssthresh = max(in_flight // 2, 2 * self.mss)
        self.bytes_acked = 0

    def on_congestion(self, in_flight: int, now: float) -> None:
        self._reduce(in_flight)
        self.cwnd = self.ssthresh

    def on_recovery_end(self, in_flight: int, now: float) -> None:
        self.cwnd = recovery_exit_window(self.ssthresh, in_flight, self.mss)
        self.bytes_acked = 0

    def end_reduction(self, now: float) -> None:
        self.cwnd = self.ssthresh
        self.bytes_acked = 0

    def on_rto(self, in_flight: int, now: float) -> None:
        # RFC 5681 equation (4) and the "loss window" of 3.1
        self._reduce(in_flight)
        self.cwnd = self.mss


class Cubic(Window):
    """CUBIC (RFC 9438) window growth and decrease.

    Windows in the formulas are in segments, time in seconds: W_cubic(t) =
    C (t - K)^3 + W_max with C = 0.4, K = cbrt((W_max - cwnd_epoch) / C);
    each ACK moves cwnd by (target - cwnd) / cwnd, target = W_cubic(t + RTT)
    clamped to [cwnd, 1.5 cwnd]; the Reno-friendly estimate W_est (4.3) is a
    floor; a congestion event keeps beta = 0.7 of the flight, with fast
    convergence (4.7). Before the first congestion event it grows like
    Reno's slow start (4.10).
    """

    name = "cubic"
    C = 0.4
    BETA = 0.7
    ALPHA = 3 * (1 - 0.7) / (1 + 0.7)
    __slots__ = ("w_max", "k", "epoch", "w_est")

    def __init__(self, mss: int, cwnd: int | None = None, ssthresh: int | None = None):
        super().__init__(mss, cwnd, ssthresh)
        self.w_max = 0.0  # window (segments) just before the last reduction
        self.k = 0.0  # time (s) the cubic function takes to return to w_max
        self.epoch = None  # start of the current congestion avoidance epoch
        self.w_est = 0.0  # Reno-friendly estimate (segments)

    def _undo_slots(self) -> tuple:
        return ("cwnd", "ssthresh", "w_max", "k", "epoch", "w_est")

    def on_ack(self, acked: int, rtt: float | None, now: float) -> None:
        mss = self.mss
        if self.cwnd < self.ssthresh:
            self.cwnd = slow_start(self.cwnd, acked, self.ssthresh)  # 4.10: Reno's slow start
            return
        cw = self.cwnd / mss
        if self.epoch is None:  # 4.2: a new congestion avoidance epoch
            self.epoch = now
            if self.w_max < cw:
                self.w_max = cw
            self.k = ((self.w_max - cw) / self.C) ** (1 / 3)
            self.w_est = cw
        t = now - self.epoch
        target = self.C * (t + (rtt or 0.0) - self.k) ** 3 + self.w_max
        target = min(max(target, cw), 1.5 * cw)
        segs = acked / mss
        self.w_est += self.ALPHA * segs / cw  # 4.3 Reno-friendly region
        if self.C * (t - self.k) ** 3 + self.w_max < self.w_est:
            new = max(cw, self.w_est)
        else:
            new = cw + (target - cw) / cw * segs  # 4.4 concave / 4.5 convex regions
        self.cwnd = max(self.cwnd, int(round(new * mss)))

    def _reduce(self, in_flight: int) -> None:
        mss = self.mss
        cw = self.cwnd / mss
        # 4.7 fast convergence: a flow that lost before reaching its last W_max releases bandwidth
        self.w_max = cw * (1 + self.BETA) / 2 if cw < self.w_max else cw
        self.ssthresh = max(int(in_flight * self.BETA), 2 * mss)  # 4.6
        self.epoch = None

    def on_congestion(self, in_flight: int, now: float) -> None:
        self._reduce(in_flight)
        self.cwnd = self.ssthresh

    def on_recovery_end(self, in_flight: int, now: float) -> None:
        self.cwnd = recovery_exit_window(self.ssthresh, in_flight, self.mss)

    def on_rto(self, in_flight: int, now: float) -> None:
        self._reduce(in_flight)
        self.cwnd = self.mss  # 4.8: the loss window


ALGORITHMS = MappingProxyType({"newreno": NewReno, "reno": NewReno, "cubic": Cubic, "bbr": Bbr})


def make(name: str, mss: int, cwnd: int | None = None, ssthresh: int | None = None) -> CongestionControl:
    """A controller by name; ``cwnd``/``ssthresh`` carry a live connection's values over a switch."""
    try:
        cls = ALGORITHMS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown congestion control {name!r} (known: {', '.join(sorted(ALGORITHMS))})") from None
    return cls(mss, cwnd, ssthresh)
