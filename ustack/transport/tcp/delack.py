"""When to acknowledge received data: delayed ACK with Linux's heuristics (RFC 1122 4.2.3.2, RFC 5681 4.2).

``DelayedAck`` is the receiver's ACK policy; the ``Receiver`` asks it, for
each in-order data segment, whether the ACK goes now or waits, and for how
long. The rules, in the order the receiver applies them:

1. Never more than two full-sized segments unacknowledged (RFC 5681 4.2,
   RFC 1122 4.2.3.2): the second one is ACKed at once (in ``Receiver``).
2. Quick-ACK mode: every segment is ACKed at once while ``quick`` > 0 and
   the flow is not interactive. The first data of a connection, and data
   after an idle gap longer than the RTO, grant rcv_wnd / (2 * rcv_mss)
   quick ACKs (at least 2, at most ``max_quickacks``, Linux's 16): slow
   start at the peer is not held back by our delay. Each ACK that
   acknowledges new data spends one.
3. Ping-pong (interactive) mode: when we send data within ``ato`` of the
   last data received, the flow is request/response and ACKs are delayed so
   that they ride on the reply. The delayed-ACK timer firing in ping-pong
   mode means no reply came: leave ping-pong mode and reset ``ato``.
4. PSH and a waiting reader: a PSH-ed segment completes a message; when the
   application is blocked in a receive (``reader_waiting``, set by the
   socket layer through ``Connection.reader_waiting``), it will consume the
   data at once, so the ACK goes at once, as Linux's tcp_cleanup_rbuf sends
   it after such a read. In ping-pong mode only the second pushed segment
   in a row is ACKed so (the first one's ACK rides on the reply). A read
   that empties the buffer after a pushed segment outside ping-pong mode
   also sends the ACK (``Receiver.after_read``).
5. Otherwise the delayed-ACK timer runs for ``ato``.

The delay ``ato`` (Linux's icsk_ack.ato) is adaptive between ``ato_min``
(``delack_timeout``, 40 ms) and ``ato_max`` (``delack_max``, 200 ms), as
Linux does it:

- it starts at ``ato_min``; each in-order data segment updates it from the
  inter-arrival gap m: m <= ato_min/2 gives ato/2 + ato_min/2 (back toward
  the minimum), m < ato gives ato/2 + m (at most the RTO); m > RTO grants
  quick ACKs (rule 2);
- the timer firing outside ping-pong mode (the peer sends slower than we
  delay) doubles it, up to the RTO; in ping-pong mode it resets it to
  ``ato_min`` and leaves ping-pong mode; leaving quick-ACK mode resets it;
- the timer is armed for min(ato, ato_max, max(SRTT, ato_min)) once ato has
  grown above ``ato_min`` (an RTT estimate bounds the delay).

The task of this class is only the decision; the receiver owns the timer.
"""

from __future__ import annotations


class DelayedAck:
    __slots__ = ("enabled", "ato", "ato_min", "ato_max", "max_quickacks", "quick", "pingpong", "lrcvtime",
                 "pushed", "reader_waiting")

    def __init__(self, enabled: bool, ato_min: float, ato_max: float, max_quickacks: int):
        self.enabled = enabled
        self.ato_min = ato_min
        self.ato_max = ato_max
        self.max_quickacks = max_quickacks
        self.ato = ato_min
        self.quick = 0  # quick ACKs left (Linux icsk_ack.quick)
        self.pingpong = False  # interactive flow: delay ACKs to ride on the reply
        self.lrcvtime = None  # when in-order data last arrived (None: not yet)
        self.pushed = False  # a PSH-ed segment is waiting for its ACK (Linux ICSK_ACK_PUSHED)
        self.reader_waiting = False  # the application is blocked in a receive

    def configure(self, enabled: bool, ato_min: float, ato_max: float, max_quickacks: int) -> None:
        self.enabled = enabled
        self.ato_min = ato_min
        self.ato_max = ato_max
        self.max_quickacks = max_quickacks
        self.ato = min(max(self.ato, ato_min), ato_max)
        self.quick = min(self.quick, max_quickacks)

    def grant_quickacks(self, rcv_wnd: int, rcv_mss: int) -> None:
        """rcv_wnd / (2 * rcv_mss) quick ACKs, at least 2, at most ``max_quickacks`` (Linux tcp_incr_quickack)."""
        n = rcv_wnd // (2 * rcv_mss) if rcv_mss > 0 else 0
        n = min(max(n, 2), self.max_quickacks)
        if n > self.quick:
            self.quick = n

    def enter_quickack(self, rcv_wnd: int, rcv_mss: int) -> None:
        """TCP_QUICKACK on (Linux tcp_enter_quickack_mode): quick ACKs, no ping-pong, ``ato_min``."""
        self.grant_quickacks(rcv_wnd, rcv_mss)
        self.pingpong = False
        self.ato = self.ato_min

    def data_received(self, now: float, rto: float, rcv_wnd: int, rcv_mss: int) -> None:
        """In-order data arrived: update ``ato`` from the gap since the last (Linux tcp_event_data_recv)."""
        last = self.lrcvtime
        if last is None:
            self.grant_quickacks(rcv_wnd, rcv_mss)  # the first data of the connection
            self.ato = self.ato_min
        else:
            m = now - last
            half = self.ato_min / 2
            if m <= half:
                self.ato = self.ato / 2 + half
            elif m < self.ato:
                self.ato = min(self.ato / 2 + m, rto)
            elif m > rto:
                self.grant_quickacks(rcv_wnd, rcv_mss)  # idle longer than the RTO: ACK quickly again
        self.lrcvtime = now

    def quickack_mode(self) -> bool:
        return self.quick > 0 and not self.pingpong

    def push_wants_ack(self) -> bool:
        """A PSH-ed segment just arrived: ACK it at once (rule 4)? Notes it as pushed otherwise."""
        if self.reader_waiting and (not self.pingpong or self.pushed):
            return True
        self.pushed = True
        return False

    def data_sent(self, now: float) -> None:
        """We sent data: a reply within ``ato`` of the last data received makes the flow interactive."""
        last = self.lrcvtime
        if last is not None and now - last < self.ato:
            self.pingpong = True

    def ack_sent(self, owed: bool) -> None:
        """An ACK left; ``owed``: it acknowledged data not yet acknowledged (spends a quick ACK)."""
        self.pushed = False
        if owed and self.quick:
            self.quick -= 1
            if not self.quick:
                self.ato = self.ato_min

    def timer_expired(self, rto: float) -> None:
        """The delayed-ACK timer fired with an ACK owed (Linux tcp_delack_timer_handler)."""
        if self.pingpong:
            self.pingpong = False
            self.ato = self.ato_min
        else:
            self.ato = min(self.ato * 2, max(rto, self.ato_min))

    def timeout(self, srtt: float | None) -> float:
        """How long the next delayed ACK may wait."""
        ato = self.ato
        if ato > self.ato_min:
            cap = self.ato_max
            if srtt:
                cap = min(cap, max(srtt, self.ato_min))
            ato = min(ato, cap)
        return ato
