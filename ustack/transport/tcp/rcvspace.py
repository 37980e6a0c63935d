"""Receive-buffer auto-tuning ("dynamic right-sizing", as Linux's tcp_rcv_space_adjust).

A fixed receive buffer caps a connection's throughput at rcvbuf / RTT. The
receiver instead measures, once per round-trip time, how many bytes the
application copied out in that RTT, and when that grew, grows the buffer to
twice it plus headroom for reordering and loss recovery (16 segments), never
beyond ``TcpConfig.rcvbuf_max``: the sender may then keep two RTTs' worth in
flight, enough for its congestion window to grow and for a lost segment's
repair without the window closing behind the hole. A reader that does not keep
up copies little per RTT, and its buffer stays as it is.

The RTT is the receiver's own estimate (Linux's tcp_rcv_rtt_measure, the
window-based one): the time RCV.NXT takes to move past the right edge
advertised when the measurement began, one window of data. It is an upper
bound of the RTT (exact when the window limits the sender), so the smallest
sample is kept. Until the first sample completes, the sender side's SRTT
(RFC 6298, sampled at the handshake at least) stands in.

Only the capacity grows: the advertised right edge never moves left (RFC 7323
2.4, RFC 9293 3.8.6.2.2), and the window scale, fixed at the handshake (RFC
7323 2.3), was chosen to cover ``rcvbuf_max`` (``TcpConfig.rcvbuf_ceiling``).
Under memory pressure (the layer's ``under_pressure``, tcp_mem_pressure) the
buffer does not grow. An application that sets ``rcvbuf`` itself (SO_RCVBUF)
turns this off for its connection, as in Linux.

Everything runs in Python when the application reads (at most once per RTT it
does more than compare a time); the C fast path reads ``ReceiveBuffer.capacity``
and follows.
"""

from __future__ import annotations

# Headroom beyond twice the bytes copied per RTT, in segments, for reordering and loss recovery
# (Linux's 16 * advmss in tcp_rcv_space_adjust).
HEADROOM_SEGMENTS = 16


class ReceiveSpace:
    """Per-connection auto-tuning state; ``limit`` 0: off (an explicit rcvbuf, or ``rcvbuf_max`` not above it)."""

    __slots__ = ("limit", "space", "mark", "time", "rtt", "rtt_seq", "rtt_time", "grown")

    def __init__(self, limit: int):
        self.limit = limit
        self.space = 0  # bytes copied in the last RTT measured (the largest so far)
        self.mark = None  # bytes copied (bytes received - readable) when the current RTT began
        self.time = None  # when it began
        self.rtt = None  # the receiver's RTT estimate (seconds): the smallest one-window sample
        self.rtt_seq = None  # bytes received at which the current one-window sample completes
        self.rtt_time = None  # when that sample began
        self.grown = 0  # times the buffer grew (tcp.rcvbuf_grown counts them layer-wide)

    def measure_rtt(self, received: int, window: int, now: float) -> None:
        """One-window RTT sample (Linux tcp_rcv_rtt_measure): ``received`` bytes so far, ``window`` advertised."""
        seq = self.rtt_seq
        if seq is not None:
            if received < seq:
                return
            sample = now - self.rtt_time
            if sample > 0 and (self.rtt is None or sample < self.rtt):
                self.rtt = sample  # an upper bound of the RTT: keep the smallest
        self.rtt_seq = received + max(window, 1)
        self.rtt_time = now

    def adjust(self, copied: int, capacity: int, mss: int, srtt: float | None, now: float,
               pressure: bool) -> int:
        """The application has copied ``copied`` bytes in all: the new capacity (>= ``capacity``).

        Once per RTT: the bytes copied in it; if more than in any RTT before, the
        buffer grows to 2 * that + HEADROOM_SEGMENTS * ``mss``, at most ``limit``,
        unless ``pressure``."""
        start = self.time
        if start is None:
            self.mark = copied
            self.time = now
            return capacity
        rtt = self.rtt if self.rtt is not None else srtt
        if rtt is None or now - start < rtt:
            return capacity
        n = copied - self.mark
        if n > self.space:
            self.space = n
            want = min(2 * n + HEADROOM_SEGMENTS * mss, self.limit)
            if want > capacity and not pressure:
                capacity = want
                self.grown += 1
        self.mark = copied
        self.time = now
        return capacity
