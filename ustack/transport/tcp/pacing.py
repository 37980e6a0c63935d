"""Pacing: new data leaves at the congestion control's ``pacing_rate``, in small bursts.

A token bucket in bytes: it fills at the pacing rate since the last
release, up to one send quantum (the controller's ``quantum``: ~1 ms of
data, at least two segments, as Linux's internal pacing releases a TSO
autosized burst at a time). The output loop may send whole segments while
the bucket holds anything (``allowance``: the bytes rounded up to whole
segments); every transmission, retransmissions included, takes its bytes
out (``spend``), so the bucket may go into debt by up to one quantum.
When data waits and the bucket is empty, ``wake_at`` says when half a
quantum will have accumulated: the sender's pacing timer fires then and
runs the output loop again. Only a controller with ``paces`` set gets a
pacer; the others send as before, unpaced.
"""

from __future__ import annotations


class Pacer:
    __slots__ = ("tokens", "last")

    def __init__(self):
        self.tokens = None  # bytes (None: full at the first release)
        self.last = 0.0

    def allowance(self, rate: float, quantum: int, mss: int, now: float) -> int:
        """Bytes the loop may send now: the bucket refilled to ``now``, rounded up to whole segments."""
        tokens = self.tokens
        if tokens is None:
            tokens = quantum
        else:
            tokens += rate * (now - self.last)
            if tokens > quantum:
                tokens = quantum
        self.tokens = tokens
        self.last = now
        if tokens <= 0:
            return 0
        return -(-int(tokens) // mss) * mss

    def spend(self, n: int, quantum: int) -> None:
        """``n`` bytes left (a debt of at most one quantum is kept)."""
        if self.tokens is None:
            self.tokens = quantum
        tokens = self.tokens - n
        self.tokens = tokens if tokens > -quantum else -quantum

    def wake_at(self, rate: float, quantum: int, now: float) -> float:
        """When half a quantum will be in the bucket again (``now`` if it already is)."""
        want = quantum / 2 - (self.tokens or 0.0)
        if want <= 0:
            return now
        return now + want / rate if rate > 0 else now + 0.001
