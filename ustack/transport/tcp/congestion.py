"""Congestion control: a small hook interface, NewReno (RFC 5681, RFC 6582) and CUBIC (RFC 9438).

The connection detects events and calls the hooks; the algorithm owns cwnd,
ssthresh and, for NewReno, the fast-recovery state:

- ``on_ack(ack, acked, flight, snd_max, now) -> bool``: SND.UNA advanced by
  ``acked`` bytes to ``ack``; ``flight`` is FlightSize after the ACK. Returns
  True when the first unacknowledged segment must be retransmitted now (a
  NewReno partial ACK, RFC 6582 3.2 step 4).
- ``on_dup_ack(ack, flight, snd_max, now) -> bool``: a duplicate ACK (RFC 5681
  section 2). Returns True when fast retransmit must happen now.
- ``on_rto(flight, snd_max, now)``: the retransmission timer expired.
- ``on_loss(flight, now)``: another congestion signal (e.g. ECN); halve.
- ``enter_recovery(ack, flight, snd_max, now) -> bool``: start fast recovery
  now (SACK says the first hole is lost, RFC 6675 section 5); False when
  RFC 6582's "recover" check refuses.
- ``window``: the congestion window in bytes; ``ssthresh``; ``in_recovery``;
  ``dupacks`` (RFC 3042 limited transmit reads it).
- ``sack``: set by the connection when SACK was negotiated: recovery then
  sets cwnd = ssthresh without inflation and partial ACKs retransmit
  nothing here, because the SACK scoreboard (``ustack.transport.tcp.sack``) decides
  what to send by RFC 6675's pipe.

``make(name, mss)`` builds one by name ("newreno", "cubic"); connections
take the name from their ``congestion`` knob.
"""

from __future__ import annotations

from types import MappingProxyType

from ustack.transport.tcp.seq import seq_add, seq_gt

INFINITE_SSTHRESH = 1 << 30


def initial_window(mss: int) -> int:
    """RFC 5681 3.1 equation (3): IW by segment size."""
    if mss > 2190:
        return 2 * mss
    if mss > 1095:
        return 3 * mss
    return 4 * mss


class NewReno:
    """RFC 5681 slow start / congestion avoidance with RFC 6582 fast recovery."""

    name = "newreno"
    __slots__ = ("mss", "cwnd", "ssthresh", "dupacks", "in_recovery", "recover", "sack", "srtt", "_bytes_acked")

    def __init__(self, mss: int, iss: int = 0):
        self.mss = mss
        self.cwnd = initial_window(mss)
        self.ssthresh = INFINITE_SSTHRESH  # 3.1: "arbitrarily high"
        self.dupacks = 0
        self.in_recovery = False
        self.recover = iss  # RFC 6582 3.2 step 1: initialised to the ISS
        self.sack = False
        self.srtt = None  # kept current by the connection (CUBIC uses it)
        self._bytes_acked = 0

    @property
    def window(self) -> int:
        return self.cwnd

    def set_mss(self, mss: int) -> None:
        """The effective MSS became known (after the handshake): re-derive IW if nothing was acked yet."""
        if self.ssthresh == INFINITE_SSTHRESH and self.cwnd == initial_window(self.mss):
            self.cwnd = initial_window(mss)
        self.mss = mss

    def _halve(self, flight: int) -> None:
        # RFC 5681 equation (4)
        self.ssthresh = max(flight // 2, 2 * self.mss)

    def on_ack(self, ack: int, acked: int, flight: int, snd_max: int, now: float) -> bool:
        self.dupacks = 0
        mss = self.mss
        if self.in_recovery:
            if seq_gt(ack, self.recover):
                # 3.2 step 3, full acknowledgement: deflate, option (1) of RFC 6582.
                self.in_recovery = False
                self.cwnd = min(self.ssthresh, max(flight, mss) + mss)
                self._bytes_acked = 0
                return False
            if self.sack:
                return False  # RFC 6675: the scoreboard decides; cwnd stays at ssthresh
            # 3.2 step 4, partial acknowledgement: deflate by the amount acked,
            # add back one SMSS when at least one SMSS was acked, retransmit.
            self.cwnd = max(mss, self.cwnd - acked + (mss if acked >= mss else 0))
            return True
        if self.cwnd < self.ssthresh:
            # slow start, RFC 5681 equation (2) (bytes counted, at most SMSS per ACK)
            self.cwnd += min(acked, mss)
        else:
            self._avoid(acked, now)
        return False

    def _avoid(self, acked: int, now: float) -> None:
        # congestion avoidance, RFC 5681 3.1: +SMSS once per cwnd of bytes acknowledged
        self._bytes_acked += acked
        if self._bytes_acked >= self.cwnd:
            self._bytes_acked -= self.cwnd
            self.cwnd += self.mss

    def on_dup_ack(self, ack: int, flight: int, snd_max: int, now: float) -> bool:
        if self.in_recovery:
            if not self.sack:
                self.cwnd += self.mss  # RFC 5681 3.2 step 4: inflate per additional dup ACK
            return False
        self.dupacks += 1
        if self.dupacks != 3:
            return False
        return self.enter_recovery(ack, flight, snd_max, now)

    def enter_recovery(self, ack: int, flight: int, snd_max: int, now: float) -> bool:
        # RFC 6582 3.2 step 2: only when the ACK covers more than "recover"
        # (no new fast retransmit for losses from before a timeout).
        if self.in_recovery or not seq_gt(ack, self.recover):
            return False
        self.recover = seq_add(snd_max, -1)  # highest sequence number transmitted
        self.in_recovery = True
        self._halve(flight)
        # RFC 5681 3.2 step 3 (inflated by the three segments that left), or RFC 6675 5 step 4.2.
        self.cwnd = self.ssthresh if self.sack else self.ssthresh + 3 * self.mss
        return True

    def on_rto(self, flight: int, snd_max: int, now: float) -> None:
        # RFC 5681 equation (4) and 3.1 "loss window"; RFC 6582 3.2 step 5.
        self._halve(flight)
        self.cwnd = self.mss
        self.recover = seq_add(snd_max, -1)
        self.in_recovery = False
        self.dupacks = 0
        self._bytes_acked = 0

    def on_loss(self, flight: int, now: float) -> None:
        self._halve(flight)
        self.cwnd = self.ssthresh
        self._bytes_acked = 0


class Cubic(NewReno):
    """CUBIC (RFC 9438) window growth and decrease, on NewReno's loss recovery (or SACK's).

    Windows in the formulas are in segments, time in seconds: W_cubic(t) =
    C (t - K)^3 + W_max with C = 0.4, K = cbrt((W_max - cwnd_epoch) / C);
    each ACK moves cwnd by (target - cwnd) / cwnd, target = W_cubic(t + RTT)
    clamped to [cwnd, 1.5 cwnd]; the Reno-friendly estimate W_est (4.3) is a
    floor; a congestion event keeps beta = 0.7 of the flight, with fast
    convergence (4.7).
    """

    name = "cubic"
    C = 0.4
    BETA = 0.7
    ALPHA = 3 * (1 - 0.7) / (1 + 0.7)
    __slots__ = ("w_max", "k", "epoch", "w_est")

    def __init__(self, mss: int, iss: int = 0):
        super().__init__(mss, iss)
        self.w_max = 0.0
        self.k = 0.0
        self.epoch = None
        self.w_est = 0.0

    def _halve(self, flight: int) -> None:
        mss = self.mss
        cw = self.cwnd / mss
        # 4.7 fast convergence: a flow that lost before reaching its last W_max releases bandwidth
        self.w_max = cw * (1 + self.BETA) / 2 if cw < self.w_max else cw
        self.ssthresh = max(int(flight * self.BETA), 2 * mss)  # 4.6
        self.epoch = None

    def _avoid(self, acked: int, now: float) -> None:
        mss = self.mss
        cw = self.cwnd / mss
        if self.epoch is None:  # 4.2: a new congestion avoidance epoch
            self.epoch = now
            if self.w_max < cw:
                self.w_max = cw
            self.k = ((self.w_max - cw) / self.C) ** (1 / 3)
            self.w_est = cw
        t = now - self.epoch
        rtt = self.srtt or 0.0
        target = self.C * (t + rtt - self.k) ** 3 + self.w_max
        target = min(max(target, cw), 1.5 * cw)
        segs = acked / mss
        self.w_est += self.ALPHA * segs / cw  # 4.3 Reno-friendly region
        if self.C * (t - self.k) ** 3 + self.w_max < self.w_est:
            new = max(cw, self.w_est)
        else:
            new = cw + (target - cw) / cw * segs  # 4.4 concave / 4.5 convex regions
        self.cwnd = max(self.cwnd, int(round(new * mss)))


ALGORITHMS = MappingProxyType({"newreno": NewReno, "reno": NewReno, "cubic": Cubic})


def make(name: str, mss: int, iss: int = 0):
    try:
        cls = ALGORITHMS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown congestion control {name!r} (known: {', '.join(sorted(ALGORITHMS))})") from None
    return cls(mss, iss)
