"""Round-trip time estimation and the retransmission timeout (RFC 6298).

``sample(r)`` folds in one measurement (section 2.2/2.3, alpha 1/8, beta
1/4, K = 4, clock granularity G); ``backoff()`` doubles the RTO after a
timeout (5.5); ``rto`` is clamped to [min_rto, max_rto]. Karn's algorithm
(section 3) is the caller's: it must not sample a retransmitted segment
unless timestamps disambiguate (RFC 7323 4).

RFC 6298 2.4 says the RTO SHOULD be rounded up to 1 s; ``min_rto`` is
configurable because practice (Linux: 200 ms) differs.

``ts_clock`` is the RFC 7323 timestamp clock (TSval): milliseconds plus a
per-connection random offset (RFC 7323 5.4 and 7.1); ``tsecr_rtt`` turns
an echoed TSecr into a measurement (RFC 7323 4.1).
"""

from __future__ import annotations

from ustack.transport.tcp.seq import MASK

ALPHA = 1 / 8
BETA = 1 / 4
K = 4


def ts_clock(now: float, offset: int) -> int:
    """Our TSval at ``now``: milliseconds plus the connection's offset, mod 2**32."""
    return (int(now * 1000) + offset) & MASK


def tsecr_rtt(now: float, offset: int, tsecr: int) -> float | None:
    """The RTT (seconds) an echoed TSecr measures, or None when it echoes a TSval from the future."""
    r = (ts_clock(now, offset) - tsecr) & MASK
    return r / 1000.0 if r < 0x7FFFFFFF else None


class RttEstimator:
    __slots__ = ("srtt", "rttvar", "rto", "min_rto", "max_rto", "granularity", "backoffs", "_base_rto")

    def __init__(self, initial_rto: float = 1.0, min_rto: float = 0.2, max_rto: float = 60.0,
                 granularity: float = 0.001):
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.min_rto = min_rto
        self.max_rto = max_rto
        self.granularity = granularity
        self.backoffs = 0
        self._base_rto = max(min_rto, min(initial_rto, max_rto))
        self.rto = self._base_rto

    def sample(self, r: float) -> None:
        """Fold in one RTT measurement ``r`` seconds; resets any backoff."""
        if r < 0:
            return
        if self.srtt is None:  # 2.2: first measurement
            self.srtt = r
            self.rttvar = r / 2
        else:  # 2.3: rttvar first, with the old srtt
            self.rttvar = (1 - BETA) * self.rttvar + BETA * abs(self.srtt - r)
            self.srtt = (1 - ALPHA) * self.srtt + ALPHA * r
        self._base_rto = self.srtt + max(self.granularity, K * self.rttvar)
        self.backoffs = 0
        self.rto = self._clamp(self._base_rto)

    def backoff(self) -> None:
        """5.5: the timer expired; double the RTO (up to max_rto)."""
        self.backoffs += 1
        self.rto = self._clamp(self.rto * 2)

    def reset_backoff(self) -> None:
        self.backoffs = 0
        self.rto = self._clamp(self._base_rto)

    def set_floor(self, rto: float) -> None:
        """5.7: after a SYN timeout the RTO is re-initialised to at least 3 s once data flows."""
        if self.srtt is None and self._base_rto < rto:
            self._base_rto = rto
            self.rto = self._clamp(max(self.rto, rto))

    def _clamp(self, rto: float) -> float:
        return min(self.max_rto, max(self.min_rto, rto))
