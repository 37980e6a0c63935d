"""The transmission control block: one slotted object per connection (RFC 9293 3.3.1).

It holds the per-connection sequence state in the RFC's names, plus what
RFC 7323 (window scale, timestamps) and RFC 2018 (SACK) add: the one record
the connection's ``Sender``, ``Receiver`` and ``Output`` share; timers,
buffers and policy live in those parts and in ``Connection``.

The same record is the fast path's typed connection state:
``TCB_LAYOUT`` (``_fastpath.TcbLayout``) holds where each slot lives in a
``Tcb`` instance, and the C code (receive header prediction for established
flows, ``_fp_tcp.pxi``) reads and writes the fields there. Nothing is
mirrored, and Python keeps the speed of plain slots.

All sequence values are 32-bit and compared with ``ustack.transport.tcp.seq``.
``snd_nxt`` is the next sequence number to send: it is pulled back to
``snd_una`` on a retransmission timeout (go-back-N) and when the peer's
window closes, while ``snd_max`` keeps the highest sequence number sent so
far + 1 (the RFC's SND.NXT for acceptability checks, as in BSD).
"""

from __future__ import annotations

from enum import IntEnum

from ustack._fastpath import TcbLayout


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


# The members as module constants: a global read is cheaper than an Enum class attribute, and the
# state machine reads them on every segment.
(CLOSED, LISTEN, SYN_SENT, SYN_RECEIVED, ESTABLISHED, FIN_WAIT_1, FIN_WAIT_2, CLOSE_WAIT, CLOSING, LAST_ACK,
 TIME_WAIT) = State

# States in which the connection is synchronized (RFC 9293 3.5.2).
SYNCHRONIZED = frozenset({
    State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2, State.CLOSE_WAIT,
    State.CLOSING, State.LAST_ACK, State.TIME_WAIT,
})
# States in which received text is delivered (RFC 9293 3.10.7.4, seventh step).
RECEIVING = frozenset({State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2})
# States in which queued data and a FIN may still be sent.
SENDING = frozenset({State.ESTABLISHED, State.CLOSE_WAIT, State.FIN_WAIT_1, State.CLOSING, State.LAST_ACK})


class Tcb:
    """Per-connection protocol state (sequence space, windows, negotiated options)."""

    __slots__ = (
        "state",
        # send sequence space
        "iss", "snd_una", "snd_nxt", "snd_max", "snd_sml", "snd_wnd", "max_snd_wnd", "snd_wl1", "snd_wl2",
        # receive sequence space
        "irs", "rcv_nxt", "rcv_wnd", "rcv_adv",
        # negotiated options
        "snd_wscale", "rcv_wscale", "snd_mss", "rcv_mss", "mss_base",
        "ts_ok", "ts_recent", "ts_recent_age", "ts_offset", "last_ack_sent", "sack_ok",
        # FIN bookkeeping
        "fin_queued", "fin_acked", "fin_rcvd", "fin_rcvd_seq",
    )

    def __init__(self):
        self.state = State.CLOSED
        self.iss = 0
        self.snd_una = 0
        self.snd_nxt = 0
        self.snd_max = 0
        self.snd_sml = 0  # end of the last sub-MSS segment sent (Minshall's Nagle, Linux snd_sml)
        self.snd_wnd = 0  # peer's window, already scaled (bytes)
        self.max_snd_wnd = 0  # largest window the peer ever offered (RFC 5961 5.2, SWS)
        self.snd_wl1 = 0
        self.snd_wl2 = 0
        self.irs = 0
        self.rcv_nxt = 0
        self.rcv_wnd = 0  # window last advertised (bytes)
        self.rcv_adv = 0  # right edge last advertised: rcv_nxt + rcv_wnd at that time
        self.snd_wscale = 0  # shift applied to the peer's window field (RFC 7323 2.3)
        self.rcv_wscale = 0  # shift applied to ours
        self.snd_mss = 536  # payload bytes per segment we send (RFC 9293 3.7.1 Eff.snd.MSS)
        self.rcv_mss = 536  # estimate of the peer's segment size (delayed ACK every 2nd full segment)
        self.mss_base = 536  # min(peer's MSS option, our route MTU - 40), before option overhead
        self.ts_ok = False
        self.ts_recent = 0
        self.ts_recent_age = 0.0
        self.ts_offset = 0
        self.last_ack_sent = 0
        self.sack_ok = False
        self.fin_queued = False  # the user shut down the sending side; FIN follows the data
        self.fin_acked = False
        self.fin_rcvd = False  # the peer's FIN has been processed (rcv_nxt is past it)
        self.fin_rcvd_seq = None  # sequence number of a FIN seen beyond rcv_nxt (out of order)


# Where the fast path finds the fields of a Tcb (offsets of its slots, read once).
TCB_LAYOUT = TcbLayout(Tcb)
