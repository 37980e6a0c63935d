"""The transmission control block: one C record per connection (RFC 9293 3.3.1).

It holds the per-connection sequence state in the RFC's names, plus what
RFC 7323 (window scale, timestamps) and RFC 2018 (SACK) add: the one record
the connection's ``Sender``, ``Receiver`` and ``Output`` share. Its fields
are C fields of ``_fastpath.TcbRecord``: the Cython fast path (receive
header prediction for established flows, ``_fp_tcp.pxi``) reads and
updates the same memory the Python parts use as attributes; timers,
buffers and policy live in those parts and in ``Connection``.

All sequence values are 32-bit and compared with ``ustack.transport.tcp.seq``.
``snd_nxt`` is the next sequence number to send: it is pulled back to
``snd_una`` on a retransmission timeout (go-back-N) and when the peer's
window closes, while ``snd_max`` keeps the highest sequence number sent so
far + 1 (the RFC's SND.NXT for acceptability checks, as in BSD).
"""

from __future__ import annotations

from enum import IntEnum

from ustack._fastpath import TcbRecord


class State(IntEnum):
    """RFC 9293 3.3.2 connection states."""

    CLOSED = 0
    LISTEN = 1
    SYN_SENT = 2
    SYN_RECEIVED = 3
    ESTABLISHED = 4
    FIN_WAIT_1 = 5
    FIN_WAIT_2 = 6
    CLOSE_WAIT = 7
    CLOSING = 8
    LAST_ACK = 9
    TIME_WAIT = 10


# States in which the connection is synchronized (RFC 9293 3.5.2).
SYNCHRONIZED = frozenset({
    State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2, State.CLOSE_WAIT,
    State.CLOSING, State.LAST_ACK, State.TIME_WAIT,
})
# States in which received text is delivered (RFC 9293 3.10.7.4, seventh step).
RECEIVING = frozenset({State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2})
# States in which queued data and a FIN may still be sent.
SENDING = frozenset({State.ESTABLISHED, State.CLOSE_WAIT, State.FIN_WAIT_1, State.CLOSING, State.LAST_ACK})


class Tcb(TcbRecord):
    """Per-connection protocol state (sequence space, windows, negotiated options).

    The fields are C fields of ``_fastpath.TcbRecord`` (shared with the
    established-path code in C), read and written as plain attributes:

    - ``state`` (a ``State``);
    - send sequence space: ``iss``, ``snd_una``, ``snd_nxt``, ``snd_max``,
      ``snd_sml`` (end of the last sub-MSS segment sent: Minshall's Nagle,
      Linux snd_sml), ``snd_wnd`` (the peer's window, already scaled),
      ``max_snd_wnd`` (the largest window the peer ever offered: RFC 5961
      5.2, SWS), ``snd_wl1``, ``snd_wl2``;
    - receive sequence space: ``irs``, ``rcv_nxt``, ``rcv_wnd`` (window last
      advertised), ``rcv_adv`` (right edge last advertised);
    - negotiated options: ``snd_wscale`` (shift applied to the peer's window
      field, RFC 7323 2.3), ``rcv_wscale`` (ours), ``snd_mss`` (RFC 9293
      3.7.1 Eff.snd.MSS, 536 at first), ``rcv_mss`` (estimate of the peer's
      segment size: delayed ACK every second full segment), ``mss_base``
      (min(peer's MSS option, our route MTU - 40)), ``ts_ok``,
      ``ts_recent``, ``ts_recent_age``, ``ts_offset``, ``last_ack_sent``,
      ``sack_ok``;
    - FIN bookkeeping: ``fin_queued`` (the user shut down the sending side),
      ``fin_acked``, ``fin_rcvd`` (the peer's FIN is processed),
      ``fin_rcvd_seq`` (a FIN seen beyond RCV.NXT, or None).
    """

    __slots__ = ()

    def __init__(self):
        TcbRecord.__init__(self, State.CLOSED)
