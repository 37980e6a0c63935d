"""A TCP connection: the RFC 9293 state machine, the user calls, and the wiring of its parts.

A ``Connection`` receives every event of RFC 9293 3.10 (user calls, in its
base ``usercalls.UserCalls``; SEGMENT ARRIVES and timeouts, here) and owns
the state machine; what the events do
to the sending and receiving sides is done by its parts, each owning its
state:

- ``tcb``: the sequence space and negotiated options (``tcb.Tcb``), the
  one record the parts share;
- ``sender`` (``sender.Sender``): send buffer, output loop, RTT, congestion
  control and loss recovery, retransmission and persist timers;
- ``receiver`` (``receiver.Receiver``): receive buffer and reassembly,
  delayed ACK, window advertisement, SACK blocks;
- ``out`` (``output.Output``): builds segments and hands them to the host.

SEGMENT ARRIVES for a synchronized connection (and SYN-RECEIVED), in order:

0. SYN-RECEIVED special cases: a retransmitted SYN gets the SYN-ACK again;
   the peer's SYN-ACK in a simultaneous open completes the handshake.
1. Timestamps (RFC 7323): once negotiated, a non-RST segment without a
   TSopt is dropped (3.2); PAWS rejects an old TSval with an ACK (5.3 R1),
   rate-limited as in step 3.
2. A SYN gets a challenge ACK whatever its sequence number (RFC 5961 4.2).
3. Acceptability test (3.10.7.4 first step, the four cases); an
   unacceptable segment is answered with an ACK unless it is a RST, at most
   one per ``challenge_ack_interval`` (Linux's tcp_invalid_ratelimit; else
   tcp.invalid_ack_ratelimited) unless it is data at most a window left of
   RCV.NXT (a retransmission: ACKed at once, D-SACK); an acceptable one is
   trimmed to the window. TS.Recent is updated (RFC 7323 4.3).
4. RST: reset only when SEG.SEQ == RCV.NXT, otherwise a challenge ACK
   (RFC 5961 3.2).
5. ACK: SYN-RECEIVED -> ESTABLISHED; acceptable range
   SND.UNA - MAX.SND.WND <= SEG.ACK <= SND.NXT else challenge ACK (RFC 5961
   5.2); then the sender takes it (new data acknowledged, duplicate ACKs,
   loss recovery, window update); FIN-WAIT-1, CLOSING and LAST-ACK
   transitions.
6. URG: ignored (urgent data is delivered in line, RFC 6093).
7. Text: to the receiver (in order, or kept for reassembly).
8. FIN: in sequence only (an early FIN waits for the gap to fill).
Then the output loop runs, and an ACK goes out if one is still owed.
Before all this, an in-order segment of an ESTABLISHED connection that the
fast path predicts (``_fastpath.EstablishedPath.input``: data in order and
in the window, or a pure ACK of new data, timestamps the only option) is
handled in C with the same effect; the layer's ``fastpath`` switch
(``USTACK_FASTPATH=0``) turns it off. The application's ``on_event`` for
such segments is called once per burst, by the layer's next ``flush``
(once per poll round), not once per segment.

User calls that produce segments (``send``, ``shutdown``, ``close``, a read
that opens the window) do not need the time: they mark the connection
dirty and ``TcpLayer.flush(now)`` (run by the stack once per poll round)
sends. Passing ``now=`` flushes at once.

Timers (one ``Timer`` each on the host's heap, all firing here):
retransmission (RFC 6298; also SYN and SYN-ACK), persist (zero-window
probes), delayed ACK (its policy in ``delack.py``), cork (TCP_CORK's 200 ms
cap), keepalive (RFC 1122 4.2.3.6, idle/interval/count), and a close timer
for the FIN-WAIT-2 timeout of closed connections. TIME-WAIT is a light
record the layer keeps instead of the connection (``timewait.py``).

Errors: a reset, refusal or timeout sets ``error`` (ConnectionResetError,
ConnectionRefusedError, TimeoutError) and closes the connection. The error
is raised once by the next ``recv``/``send`` (or taken by ``take_error``,
like SO_ERROR); after that ``recv`` returns b"" and ``send`` raises
BrokenPipeError. Data received before a reset stays readable.

Used by the layer and the listener (besides the user calls):
``open_active``, ``open_passive``, ``open_from_cookie``,
``segment_arrives``, ``icmp_error``, ``flush``, ``terminate``,
``detach_listener``.
"""

from __future__ import annotations

import errno
import weakref

from ustack.timers import UNARMED
from ustack.transport.tcp.config import TcpConfig
from ustack.transport.tcp.isn import isn_at
from ustack.transport.tcp.output import Output
from ustack.transport.tcp.receiver import Receiver
from ustack.transport.tcp.sender import Sender
from ustack.transport.tcp.usercalls import UserCalls
from ustack.transport.tcp.seq import seq_add, seq_diff, seq_ge, seq_gt, seq_in, seq_le, seq_lt
from ustack.transport.tcp.tcb import (CLOSE_WAIT, CLOSED, CLOSING, ESTABLISHED, FIN_WAIT_1, FIN_WAIT_2, LAST_ACK,
                                      RECEIVING, SYN_RECEIVED, SYN_SENT, SYNCHRONIZED, TIME_WAIT, State, Tcb)
from ustack.wire.icmp import error_to_oserror
from ustack.wire.tcp import ACK, FIN, PSH, RST, SYN, headers_len

_NEG_INF = float("-inf")
# The largest window a 16-bit field can offer before scaling (RFC 7323 2.2): how far left of RCV.NXT
# a retransmission can start.
MAX_WINDOW = 0xFFFF
# RFC 7323 5.5: TS.Recent is invalid after 24 days of idleness.
PAWS_IDLE = 24 * 24 * 3600.0


def window_shift_for(rcvbuf: int) -> int:
    """The smallest window scale that lets the 16-bit field cover ``rcvbuf`` (RFC 7323 2.3, max 14):
    ``rcvbuf >> shift`` fits 16 bits when ``rcvbuf`` has at most 16 + shift bits."""
    return min(max(rcvbuf.bit_length() - 16, 0), 14)


class Connection(UserCalls):
    """One TCP connection (see the module docstring)."""

    __slots__ = (
        "layer", "host", "config", "tcb", "out", "sender", "receiver",
        "local_addr", "local_port", "remote_addr", "remote_port", "key", "listener", "passive",
        "error", "_pending_error", "wr_shutdown", "orphaned", "on_event", "on_send_low_water", "on_recv_high_water",
        "_keepalive_timer", "_close_timer", "_keep_probes", "_syn_time", "_syn_retransmitted", "_last_challenge",
        "_last_rcv", "_offer_ws", "_offer_ts", "_offer_sack", "_own_mss", "_dirty", "_soft_error",
        "segs_in", "segs_fast", "challenge_acks", "_orphan_counted", "_orphan_probes", "_orphan_una",
        "_charged", "_fast", "_notify_due", "_isn_f", "__weakref__",
    )

    def __init__(self, layer, config: TcpConfig, local: tuple, remote: tuple, listener=None, hashes=None,
                 own_mss: int | None = None):
        self.layer = layer
        host = self.host = layer.host
        self.config = config
        tcb = self.tcb = Tcb()
        self.local_addr, self.local_port = bytes(local[0]), local[1]
        self.remote_addr, self.remote_port = bytes(remote[0]), remote[1]
        self.key = (self.local_addr, self.local_port, self.remote_addr, self.remote_port)
        self.listener = listener
        self.passive = listener is not None
        if own_mss is None:  # (given: what a ``synrecv.SynReceived`` record found for its SYN-ACK)
            own_mss = host.route_mtu(self.remote_addr) - headers_len(self.remote_addr)
            if config.mss:
                own_mss = min(own_mss, config.mss)
            own_mss = max(own_mss, 88)
        self._own_mss = own_mss
        # Timers call ``Connection._on_*(self, now)`` (no bound method each); the delayed-ACK,
        # keepalive, close, persist, cork and pacing timers are made when first armed
        # (``timers.UNARMED`` until then: ``sender_timer``).
        timers = host.timers
        cls = Connection
        self.receiver = Receiver(tcb, config, host.stats, timers, self, cls._on_delack_timer, self._recv_high_water)
        self.out = Output(tcb, self.receiver, host, (self.local_addr, self.local_port),
                          (self.remote_addr, self.remote_port))
        sender = self.sender = Sender(tcb, config, host.stats, self.out, timers.timer(cls._on_rtx_timer, self),
                                      UNARMED, self._send_low_water, min(own_mss, 536), UNARMED, UNARMED)
        sender.timer_maker = self
        self.receiver.rtt = sender.rtt
        self._keepalive_timer = UNARMED
        self._close_timer = UNARMED
        self.error = None
        self._pending_error = None
        self.wr_shutdown = False
        self.orphaned = False
        self.on_event = None
        self.on_send_low_water = None
        self.on_recv_high_water = None
        self._keep_probes = 0
        self._syn_time = 0.0
        self._syn_retransmitted = False
        self._last_challenge = _NEG_INF
        self._last_rcv = 0.0
        self._offer_ws = config.window_scaling
        self._offer_ts = config.timestamps
        self._offer_sack = config.sack
        self._dirty = False
        self._soft_error = None
        self.segs_in = self.challenge_acks = 0
        self.segs_fast = 0  # segments the fast path took (of segs_in)
        self._orphan_counted = False  # counted in layer.orphans (closed by the user, not yet CLOSED/TIME-WAIT)
        self._orphan_probes = 0  # orphan timer expiries without progress of SND.UNA
        self._orphan_una = 0
        self._charged = 0  # buffer bytes charged to the layer's memory budget (tcp_mem); -1 once CLOSED
        self.receiver.budget = layer
        self.receiver.rcvbuf.hold = layer.rx_hold
        # Receive header prediction in C (``_fastpath.EstablishedPath.input``), or None: Python only.
        self._fast = layer.established.input if layer.fastpath else None
        self.out.ctl = layer.established if layer.fastpath else None  # segments without data in C
        self.sender.tx = layer.tx if layer.fastpath else None  # full-sized segments of new data in C (_fp_tx.pxi)
        self._notify_due = False  # a fast-path segment's on_event waits for the layer's flush
        tcb.rcv_wscale = window_shift_for(config.rcvbuf_ceiling) if config.window_scaling else 0
        # RFC 6528's F and the timestamp offset (RFC 7323 7.1) from one keyed digest of the 4-tuple.
        # (``hashes``: the pair already made for this 4-tuple, by a ``synrecv.SynReceived`` record.)
        self._isn_f, tcb.ts_offset = hashes if hashes is not None else layer.keyed.connection_hashes(*self.key)

    def __repr__(self) -> str:
        return (f"<Connection {_fmt(self.local_addr, self.local_port)} -> "
                f"{_fmt(self.remote_addr, self.remote_port)} {self.tcb.state.name}>")

    # -- opening (RFC 9293 3.10.1, 3.10.7.2) -----------------------------

    def open_active(self, now: float) -> None:
        """Active OPEN: send the SYN, enter SYN-SENT."""
        tcb = self.tcb
        tcb.iss = isn_at(self._isn_f, now)
        tcb.snd_una = tcb.iss
        tcb.state = SYN_SENT
        self._syn_time = now
        self._last_rcv = now
        self._send_syn(SYN, now)
        self.host.stats.inc("tcp.active_opens")

    def open_passive(self, seg, now: float) -> None:
        """A SYN reached a listener: enter SYN-RECEIVED, send the SYN-ACK."""
        self._syn_received(seg, isn_at(self._isn_f, now), now)
        self._send_syn(SYN | ACK, now)
        self.host.stats.inc("tcp.passive_opens")

    def adopt(self, rec, timer) -> None:
        """Become the connection a ``synrecv.SynReceived`` record stands for: SYN-RECEIVED as
        ``open_passive`` at ``rec.syn_time`` leaves it, the record's SYN-ACK sent (its ISS, what
        ``_send_syn`` and ``Output.emit_syn`` note) and ``timer`` (the SYN-ACK's retransmission
        timer, still armed or firing) as this connection's retransmission timer."""
        now = rec.syn_time
        self._syn_received(rec, rec.iss, now)
        tcb = self.tcb
        tcb.snd_nxt = tcb.snd_max = seq_add(tcb.iss, 1)
        receiver = self.receiver
        receiver.syn_window(True)
        receiver.ack_sent(now, False)
        self.out.segs_out += 1
        if timer is not None:
            timer.callback = Connection._on_rtx_timer
            timer.owner = self
            self.sender.rtx_timer = timer

    def _syn_received(self, seg, iss: int, now: float) -> None:
        """The TCB of SYN-RECEIVED after the SYN ``seg`` (RFC 9293 3.10.7.2), our ISS ``iss``."""
        tcb = self.tcb
        tcb.irs = seg.seq
        tcb.rcv_nxt = seq_add(seg.seq, 1)
        tcb.last_ack_sent = tcb.rcv_nxt
        tcb.iss = iss
        tcb.snd_una = tcb.iss
        self._negotiate(seg, now)
        tcb.snd_wnd = seg.window
        tcb.max_snd_wnd = seg.window
        tcb.snd_wl1 = seg.seq
        tcb.state = SYN_RECEIVED
        self._syn_time = now
        self._last_rcv = now

    def open_from_cookie(self, seg, mss: int, peer_wscale: int | None, sack_ok: bool, now: float) -> None:
        """Rebuild a connection from a valid SYN-cookie ACK (RFC 4987 3.6): straight to ESTABLISHED."""
        tcb = self.tcb
        tcb.irs = seq_add(seg.seq, -1)
        tcb.rcv_nxt = seg.seq
        tcb.last_ack_sent = seg.seq
        tcb.iss = seq_add(seg.ack, -1)
        tcb.snd_una = tcb.snd_nxt = tcb.snd_max = seg.ack
        tcb.mss_base = max(64, min(mss, self._own_mss))
        if peer_wscale is not None and self.config.window_scaling:
            tcb.snd_wscale = min(peer_wscale, 14)
        else:
            tcb.snd_wscale = tcb.rcv_wscale = 0
        ts = seg.timestamps
        tcb.ts_ok = self.config.timestamps and ts is not None
        if tcb.ts_ok:
            tcb.ts_recent = ts[0]
            tcb.ts_recent_age = now
        tcb.sack_ok = self.config.sack and sack_ok
        self.sender.use_sack(tcb.sack_ok)
        tcb.snd_mss = tcb.mss_base - (12 if tcb.ts_ok else 0)
        tcb.rcv_mss = min(tcb.snd_mss, 536)
        # The SYN-ACK advertised min(free, 65535) unscaled; assume that much is offered.
        tcb.rcv_adv = seq_add(tcb.rcv_nxt, min(self.receiver.rcvbuf.free, 0xFFFF))
        tcb.snd_wnd = seg.window << tcb.snd_wscale
        tcb.max_snd_wnd = tcb.snd_wnd
        tcb.snd_wl1 = seg.seq
        tcb.snd_wl2 = seg.ack
        self._syn_time = now
        self._last_rcv = now
        self.host.stats.inc("tcp.passive_opens")
        self._become_established(now)  # no handshake RTT sample: the SYN-ACK time was not kept

    def _negotiate(self, seg, now: float) -> None:
        """Options of the peer's SYN or SYN-ACK (RFC 9293 3.7.1, RFC 7323 2.2/3.2, RFC 2018)."""
        tcb = self.tcb
        peer_mss = seg.mss or 536  # no MSS option: 536 (RFC 9293 3.7.1)
        tcb.mss_base = max(64, min(peer_mss, self._own_mss))
        if self._offer_ws and seg.wscale is not None:
            tcb.snd_wscale = min(seg.wscale, 14)  # RFC 7323 2.3: larger values are treated as 14
        else:
            self._offer_ws = False
            tcb.snd_wscale = tcb.rcv_wscale = 0
        if self._offer_ts and seg.timestamps is not None:
            tcb.ts_ok = True
            tcb.ts_recent = seg.timestamps[0]
            tcb.ts_recent_age = now
        else:
            self._offer_ts = False
        tcb.sack_ok = self._offer_sack and seg.sack_permitted
        self._offer_sack = tcb.sack_ok
        tcb.snd_mss = tcb.mss_base - (12 if tcb.ts_ok else 0)
        tcb.rcv_mss = min(tcb.snd_mss, 536)
        self.sender.cc.set_mss(tcb.snd_mss)
        self.sender.use_sack(tcb.sack_ok)

    def _send_syn(self, flags: int, now: float) -> None:
        """Our SYN (SYN-SENT) or SYN-ACK (SYN-RECEIVED), first or again."""
        tcb = self.tcb
        self.out.emit_syn(flags, now, self._own_mss, tcb.rcv_wscale if self._offer_ws else None, self._offer_sack,
                          self._offer_ts)
        tcb.snd_nxt = tcb.snd_max = seq_add(tcb.iss, 1)
        self.sender.arm_rtx(now, restart=not flags & ACK)

    def _handshake_acked(self, seg, seq: int, ack: int, now: float) -> None:
        """SYN-RECEIVED, an acceptable ACK of our SYN (RFC 9293 3.10.7.4, fifth step): SND.UNA and the
        send window from it, the handshake's RTT sample, ESTABLISHED."""
        tcb = self.tcb
        tcb.snd_una = ack
        tcb.snd_wnd = seg.window << tcb.snd_wscale
        tcb.max_snd_wnd = max(tcb.max_snd_wnd, tcb.snd_wnd)
        tcb.snd_wl1 = seq
        tcb.snd_wl2 = ack
        self._handshake_rtt(seg, now)
        self._become_established(now)

    def _handshake_rtt(self, seg, now: float) -> None:
        """An RTT sample from the handshake (timestamps, or Karn: only an unretransmitted SYN)."""
        if not self.sender.sample_tsecr(seg.timestamps, now) and not self._syn_retransmitted:
            self.sender.rtt.sample(now - self._syn_time)

    def _become_established(self, now: float) -> None:
        tcb = self.tcb
        self.sender.established(self._syn_retransmitted)
        self._set_state(FIN_WAIT_1 if tcb.fin_queued else ESTABLISHED)
        self.host.stats.inc("tcp.established")
        if self.config.keepalive:
            self._keepalive().arm(now + self.config.keepidle)
        if self.listener is not None:
            self.listener.child_established(self)

    # -- SEGMENT ARRIVES (RFC 9293 3.10.7.3, 3.10.7.4) -------------------

    def segment_arrives(self, seg, payload, now: float) -> None:
        """Process one segment for this connection.

        ``seg`` has the header's fields as attributes (``seq``, ``ack``,
        ``flags``, ``window``, ``mss``, ``wscale``, ``sack_permitted``,
        ``sack_blocks``, ``timestamps``): a ``TcpHeader`` or the fast path's
        record. ``payload`` is the data after the header.
        """
        self.segs_in += 1
        self._last_rcv = now
        self._keep_probes = 0
        self.sender.probes_out = 0
        st = self.tcb.state
        if st == SYN_SENT:
            self._syn_sent_arrives(seg, payload, now)
        elif st == LAST_ACK and _final_ack(self, seg, payload):
            return  # our FIN is acknowledged: CLOSED (RFC 9293 3.10.7.4), the TCB deleted, the application told
        elif st != CLOSED:
            fast = self._fast
            if fast is not None and fast(self, seg, payload, now):
                self.segs_fast += 1
                self._recharge()
                if self.on_event is not None and not self._notify_due:
                    self._notify_due = True  # the application hears of the burst once (TcpLayer.flush)
                    self.layer.notify_later(self)
                return
            if st in RECEIVING and _peer_fin(self, seg, payload, now):
                if st == ESTABLISHED and self.tcb.state != ESTABLISHED:
                    # The FIN's CLOSE-WAIT (_set_state) told the application last; what followed only
                    # sent (our ACK, or the FIN its close() queued): no second notification.
                    self._recharge()
                    return
            else:
                self._synchronized_arrives(seg, payload, now)
            if self.tcb.state == TIME_WAIT:
                # Only a light record stays (timewait.py); the window is the one the last ACK carried.
                self.layer.enter_time_wait(self, self.receiver.select_window(), now)
        self._recharge()
        self._notify()

    def notify_due(self) -> None:
        """The end of a burst the fast path took (``TcpLayer.flush``): tell the application once."""
        self._notify_due = False
        self._notify()

    def _syn_sent_arrives(self, seg, payload, now: float) -> None:
        tcb = self.tcb
        flags = seg.flags
        stats = self.host.stats
        if flags & ACK:
            if seq_le(seg.ack, tcb.iss) or seq_gt(seg.ack, tcb.snd_max):
                stats.drop("tcp.bad_ack")
                if not flags & RST:
                    self.out.send_rst(now, seg.ack)
                return
        if flags & RST:
            if flags & ACK:  # acceptable ACK: the peer refused (RFC 5961 3.2 for SYN-SENT)
                self._fail(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
            else:
                stats.drop("tcp.rst_without_ack")
            return
        if not flags & SYN:
            stats.drop("tcp.no_syn")
            return
        tcb.irs = seg.seq
        tcb.rcv_nxt = seq_add(seg.seq, 1)
        tcb.rcv_adv = seq_add(tcb.rcv_nxt, tcb.rcv_wnd)
        tcb.last_ack_sent = tcb.rcv_nxt
        self._negotiate(seg, now)
        tcb.snd_wnd = seg.window  # RFC 7323 2.2: never scaled in a SYN
        tcb.max_snd_wnd = max(tcb.max_snd_wnd, tcb.snd_wnd)
        tcb.snd_wl1 = seg.seq
        tcb.snd_wl2 = seg.ack
        if flags & ACK:
            tcb.snd_una = seg.ack
            self._handshake_rtt(seg, now)
            self._become_established(now)
            receiver = self.receiver
            receiver.ack_now = True
            if payload or flags & FIN:  # data on a SYN-ACK: rare, but legal
                data = payload[: max(0, seq_diff(tcb.rcv_adv, tcb.rcv_nxt))]
                if data:
                    self._receive_text(tcb.rcv_nxt, data, now)
                if flags & FIN and len(data) == len(payload):
                    self._fin_arrives(now)
            self.sender.output(now)
            if receiver.ack_now:
                self.out.send_ack(now)
        else:
            # Simultaneous open (RFC 9293 3.10.7.3, Figure 7).
            tcb.state = SYN_RECEIVED
            self._send_syn(SYN | ACK, now)

    def _synchronized_arrives(self, seg, payload, now: float) -> None:
        tcb = self.tcb
        flags = seg.flags
        seq = seg.seq
        st = tcb.state
        stats = self.host.stats

        if st == SYN_RECEIVED and flags & SYN and not flags & RST and seq == tcb.irs:
            if not flags & ACK:
                stats.inc("tcp.syn_retransmits_seen")
                self._send_syn(SYN | ACK, now)  # our SYN-ACK was lost
                return
            if seg.ack == tcb.snd_max:  # the crossing SYN-ACK of a simultaneous open
                tcb.snd_una = seg.ack
                tcb.snd_wnd = seg.window
                tcb.max_snd_wnd = max(tcb.max_snd_wnd, tcb.snd_wnd)
                tcb.snd_wl1 = seq
                tcb.snd_wl2 = seg.ack
                self._handshake_rtt(seg, now)
                self._become_established(now)
                self.sender.output(now)
                return

        ts = seg.timestamps
        if tcb.ts_ok and not flags & RST:
            if ts is None:
                stats.drop("tcp.no_timestamp")  # RFC 7323 3.2
                return
            if seq_lt(ts[0], tcb.ts_recent):
                if now - tcb.ts_recent_age <= PAWS_IDLE:
                    stats.drop("tcp.paws")  # RFC 7323 5.3 R1
                    self._invalid_ack(now)
                    return
                # RFC 7323 5.5: TS.Recent is stale after 24 idle days; start again from this one.
                tcb.ts_recent = ts[0]
                tcb.ts_recent_age = now

        if flags & SYN and not flags & RST:
            stats.drop("tcp.syn_in_window")
            self._challenge_ack(now)  # RFC 5961 4.2
            return

        # First: the acceptability test.
        rcv_nxt = tcb.rcv_nxt
        rcv_wnd = seq_diff(tcb.rcv_adv, rcv_nxt)
        if rcv_wnd < 0:
            rcv_wnd = 0
        dlen = len(payload)
        seg_len = dlen + (1 if flags & FIN else 0)
        if seg_len == 0:
            ok = seq == rcv_nxt if rcv_wnd == 0 else seq_in(seq, rcv_nxt, seq_add(rcv_nxt, rcv_wnd))
        elif rcv_wnd == 0:
            # Not acceptable as text, but its ACK (and RST) must still be processed.
            ok = seq == rcv_nxt
        else:
            end = seq_add(rcv_nxt, rcv_wnd)
            ok = seq_in(seq, rcv_nxt, end) or seq_in(seq_add(seq, seg_len - 1), rcv_nxt, end)
        if not ok:
            if flags & RST:
                stats.drop("tcp.rst_out_of_window")
                return
            stats.drop("tcp.unacceptable")
            if seq_le(seq_add(seq, seg_len), rcv_nxt):
                # Wholly left of RCV.NXT: the peer's retransmission, or a segment that crossed a later
                # one on the way (a kernel sending from two CPUs over veth does this); not a window overrun.
                stats.inc("tcp.unacceptable_old")
            if (dlen and seq_le(seq_add(seq, dlen), rcv_nxt)
                    and seq_diff(rcv_nxt, seq) <= MAX_WINDOW << tcb.rcv_wscale):
                # Data at most a window back: the peer's retransmission. Its ACK goes at once, with the
                # D-SACK (RFC 2883), as Linux answers data unlimited (tcp_oow_rate_limited).
                self.receiver.duplicate(seq, seq_add(seq, dlen))
                self.out.send_ack(now)
            else:
                self._invalid_ack(now)
            return

        # Trim to the window: old bytes off the front, bytes past the window off the end.
        data = payload
        fin = flags & FIN
        dseq = seq
        if seq_lt(seq, rcv_nxt):
            skip = seq_diff(rcv_nxt, seq)
            if data:
                self.receiver.duplicate(seq, seq_add(seq, min(skip, len(data))))  # RFC 2883
            data = data[skip:]
            dseq = rcv_nxt
        room = rcv_wnd - seq_diff(dseq, rcv_nxt)
        if len(data) > room:
            data = data[: max(room, 0)]
            fin = 0
            self.receiver.ack_now = True
            stats.inc("tcp.rcv_beyond_window")

        # Second: RST (RFC 5961 3.2).
        if flags & RST:
            if seq == rcv_nxt:
                self._reset_received()
            else:
                stats.drop("tcp.rst_not_exact")
                self._challenge_ack(now)
            return

        # Fifth: ACK.
        if not flags & ACK:
            stats.drop("tcp.no_ack")
            return
        if st == SYN_RECEIVED:
            ack = seg.ack
            if not (seq_lt(tcb.snd_una, ack) and seq_le(ack, tcb.snd_max)):
                stats.drop("tcp.bad_ack")
                self.out.send_rst(now, ack)
                return
            if self.listener is not None and not self.listener.has_room():
                stats.drop("tcp.accept_queue_full")
                return
            self._handshake_acked(seg, seq, ack, now)
        elif not self._process_ack(seg, dlen, now):
            return
        st = tcb.state
        # RFC 7323 4.3 (2), only once the ACK was found acceptable (as Linux since 2013): an in-window
        # segment with a forged ACK, dropped above, must not plant its TSval and PAWS-block the peer.
        if tcb.ts_ok and ts is not None and seq_le(seq, tcb.last_ack_sent) and seq_ge(ts[0], tcb.ts_recent):
            tcb.ts_recent = ts[0]
            tcb.ts_recent_age = now

        # Seventh: text.
        if data:
            if st in RECEIVING:
                if self.orphaned:
                    # Data for a connection the user has closed: nobody will read it (RFC 2525 2.17).
                    stats.drop("tcp.data_after_close")
                    self.out.send_rst(now, tcb.snd_max, tcb.rcv_nxt)
                    self.terminate()
                    return
                if self.layer.mem_room() < len(data):
                    # tcp_mem pressure: the layer's buffers are full; the data is not taken (the peer
                    # sends it again) and our window stops opening (Receiver.select_window).
                    stats.drop("tcp.mem_pressure")
                    self.receiver.ack_now = True
                    data = b""
                    fin = 0
                elif self.layer.under_pressure and dseq != tcb.rcv_nxt:
                    # Soft memory pressure: out-of-order data is not queued (Linux's TCPOFODrop when
                    # memory cannot be scheduled); the ACK at once tells the peer where the gap is.
                    stats.drop("tcp.mem_pressure_ooo")
                    self.receiver.ack_now = True
                    data = b""
                    fin = 0
                else:
                    self._receive_text(dseq, data, now, bool(seg.flags & PSH))
            else:
                stats.drop("tcp.data_after_fin")

        # Eighth: FIN.
        if fin:
            fin_seq = seq_add(dseq, len(data))
            if fin_seq == tcb.rcv_nxt and not tcb.fin_rcvd:
                self._fin_arrives(now)
            elif seq_gt(fin_seq, tcb.rcv_nxt):
                tcb.fin_rcvd_seq = fin_seq  # early FIN: wait for the gap to fill
                self.receiver.ack_now = True

        if tcb.state != CLOSED:
            self.sender.output(now)
            if self.receiver.ack_now:
                self.out.send_ack(now)

    def _process_ack(self, seg, dlen: int, now: float) -> bool:
        """Fifth step for synchronized states; False when the segment is to be dropped."""
        tcb = self.tcb
        ack = seg.ack
        if seq_gt(ack, tcb.snd_max):
            self.host.stats.drop("tcp.ack_unsent")
            self._challenge_ack(now)
            return False
        if seq_lt(ack, seq_add(tcb.snd_una, -tcb.max_snd_wnd)):
            self.host.stats.drop("tcp.ack_too_old")
            self._challenge_ack(now)  # RFC 5961 5.2
            return False
        sender = self.sender
        if tcb.state == LAST_ACK and seq_diff(ack, tcb.snd_una) > len(sender.sndbuf):
            # RFC 9293 3.10.7.4 fifth, LAST-ACK: "If our FIN is now acknowledged, delete the TCB, enter
            # the CLOSED state, and return." No RTT sample, window or congestion update for a TCB
            # about to go (the bytes it acknowledges still count, as tcpi_bytes_acked).
            sender.bytes_acked += len(sender.sndbuf)
            tcb.snd_una = ack
            tcb.fin_acked = True
            self.terminate()
            return False
        sender.on_ack(seg, dlen, now)
        if tcb.fin_acked:
            st = tcb.state
            if st == FIN_WAIT_1:
                self._set_state(FIN_WAIT_2)
                if self.orphaned:
                    self._closer().arm(now + self.config.fin_wait2_timeout)
            elif st == CLOSING:
                self._enter_time_wait(now)
            elif st == LAST_ACK:
                self.terminate()
                return False
        return True

    def _receive_text(self, dseq: int, data, now: float, push: bool = False) -> None:
        tcb = self.tcb
        self.receiver.receive(dseq, data, now, push)
        if tcb.fin_rcvd_seq is not None and tcb.fin_rcvd_seq == tcb.rcv_nxt:
            self._fin_arrives(now)  # the gap before an early FIN has filled

    def _fin_arrives(self, now: float) -> None:
        tcb = self.tcb
        self.receiver.receive_fin()
        st = tcb.state
        if st in (SYN_RECEIVED, ESTABLISHED):
            self._set_state(CLOSE_WAIT)
        elif st == FIN_WAIT_1:
            if tcb.fin_acked:
                self._enter_time_wait(now)
            else:
                self._set_state(CLOSING)  # simultaneous close
        elif st == FIN_WAIT_2:
            self._enter_time_wait(now)

    def _reset_received(self) -> None:
        st = self.tcb.state
        self.host.stats.inc("tcp.resets_received")
        if st == SYN_RECEIVED:
            if self.passive:
                self.terminate()  # back to LISTEN: the listener simply forgets it
            else:
                self._fail(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
        elif st in (ESTABLISHED, FIN_WAIT_1, FIN_WAIT_2, CLOSE_WAIT):
            self._fail(ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"))
        else:
            self.terminate()

    def _invalid_ack(self, now: float) -> None:
        """The ACK an unacceptable segment or a PAWS drop draws (RFC 9293 3.10.7.4 first step, RFC 7323 5.3),
        at most one per ``challenge_ack_interval`` per connection, the rest counted
        (tcp.invalid_ack_ratelimited): Linux's tcp_invalid_ratelimit (500 ms). Unlimited, two stacks that one
        forged in-window segment each has desynchronized ACK each other's ACKs for ever, and every off-path
        forgery is reflected. Challenge ACKs share the clock (``_last_challenge``), as Linux's
        last_oow_ack_time."""
        if now - self._last_challenge < self.config.challenge_ack_interval:
            self.host.stats.inc("tcp.invalid_ack_ratelimited")
            return
        self._last_challenge = now
        self.out.send_ack(now)

    def _challenge_ack(self, now: float) -> None:
        """RFC 5961 3.2/4.2/5.2 challenge ACK, rate-limited per connection and per layer (section 7)."""
        if now - self._last_challenge < self.config.challenge_ack_interval or not self.layer.challenge_allowed(now):
            self.host.stats.inc("tcp.challenge_acks_suppressed")
            return
        self._last_challenge = now
        self.challenge_acks += 1
        self.host.stats.inc("tcp.challenge_acks")
        self.out.send_ack(now)

    # -- state changes ---------------------------------------------------

    def _keepalive(self):
        """The keepalive timer, made on first use."""
        timer = self._keepalive_timer
        if timer is UNARMED:
            timer = self._keepalive_timer = self.host.timers.timer(Connection._on_keepalive_timer, self)
        return timer

    def _closer(self):
        """The close timer (the FIN-WAIT-2 timeout of closed connections), made on first use."""
        timer = self._close_timer
        if timer is UNARMED:
            timer = self._close_timer = self.host.timers.timer(Connection._on_close_timer, self)
        return timer

    def _set_state(self, state: State) -> None:
        self.tcb.state = state
        self._notify()

    def _enter_time_wait(self, now: float) -> None:
        """TIME-WAIT: the layer keeps a ``timewait.TimeWait`` record instead (after this segment)."""
        self.sender.stop()
        self.receiver.stop()
        self._keepalive_timer.cancel()
        self._close_timer.cancel()
        self._set_state(TIME_WAIT)
        self._uncount_orphan()  # TIME-WAIT holds no data: no longer an orphan that costs memory
        self.layer.charge(-max(self._charged, 0))  # what is left unread is the user's now (as terminate)
        self._charged = -1
        if self.orphaned:
            self._unlink()

    def _unlink(self) -> None:
        """Let a connection the application closed be freed at once, by reference counting.

        Cancelled timers stay on the heap until their deadline surfaces (lazy deletion), and would
        keep it alive until its FIN-WAIT-2 timeout (60 s) or retransmission deadline; its parts
        point back at it (callbacks), a cycle only the garbage collector would break.
        """
        sender = self.sender
        receiver = self.receiver
        for timer in (sender.rtx_timer, sender.persist_timer, sender.cork_timer, receiver.delack_timer,
                      self._keepalive_timer, self._close_timer, sender.pace_timer):
            if timer is not UNARMED:
                timer.cancel()
                timer.owner = None
                timer.callback = _unlinked
        sender.low_water = receiver.high_water = _nothing
        receiver._owner = None  # the owner its delayed-ACK timer would be made for (never again)
        sender.timer_maker = None  # (the same for the sender's lazily made timers)
        # Loss recovery points back at its sender (a cycle holding the sender, receiver, output, TCB and
        # buffers for the collector); nothing sends any more (output returns before it is asked).
        sender.recovery.sender = None

    def weak(self):
        """A weak reference to this connection (the TIME-WAIT record's link to it)."""
        return weakref.ref(self)

    def terminate(self) -> None:
        """Enter CLOSED and delete the TCB (leave the layer), sending nothing."""
        tcb = self.tcb
        if tcb.state == CLOSED:
            return
        tcb.state = CLOSED
        self._uncount_orphan()
        self.layer.charge(-max(self._charged, 0))  # what is left unread is the user's now
        self._charged = -1
        self.sender.stop()
        self.receiver.stop()
        self._keepalive_timer.cancel()
        self._close_timer.cancel()
        self.sender.sndbuf.clear()
        if self.orphaned:
            self._unlink()
        self.layer.forget(self)
        if self.listener is not None:
            self.listener.child_gone(self)
        self._notify()

    def detach_listener(self) -> None:
        """The listener lets go of this connection (accepted, or the listener closed)."""
        self.listener = None

    def _fail(self, exc: OSError) -> None:
        self.error = exc
        self._pending_error = exc
        self.host.stats.inc("tcp.errors." + type(exc).__name__)
        self.terminate()

    def _timeout_error(self) -> OSError:
        """ETIMEDOUT, or the soft ICMP error that probably explains it (RFC 1122 4.2.3.9)."""
        return self._soft_error or TimeoutError(errno.ETIMEDOUT, "Connection timed out")

    def _notify(self) -> None:
        cb = self.on_event
        if cb is not None:
            cb(self)

    def _send_low_water(self) -> None:
        cb = self.on_send_low_water
        if cb is not None:
            cb(self)

    def _recv_high_water(self) -> None:
        cb = self.on_recv_high_water
        if cb is not None:
            cb(self)

    def _mark_dirty(self, now: float | None) -> None:
        if now is not None:
            self._send_pending(now)
        elif not self._dirty:
            self._dirty = True
            self.layer.mark_dirty(self)

    def flush(self, now: float) -> None:
        """Send what user calls left pending (``TcpLayer.flush``)."""
        if self._dirty:
            self._send_pending(now)

    def _send_pending(self, now: float) -> None:
        self._dirty = False
        tcb = self.tcb
        if tcb.state == CLOSED:
            return
        self.sender.output(now)
        receiver = self.receiver
        if (receiver.wnd_update or receiver.ack_now) and tcb.state in SYNCHRONIZED:
            if self._fast is not None:
                self.layer.established.send_ack(self, now)  # the same ACK, built in C (_fp_ack.pxi)
            else:
                self.out.send_ack(now)

    # -- ICMP ------------------------------------------------------------

    def icmp_error(self, itype: int, code: int, extra: int, now: float | None) -> None:
        """RFC 1122 4.2.3.9 / RFC 5927: most ICMP errors are soft (remembered, reported only if the
        connection then times out); in SYN-SENT a destination unreachable aborts the open."""
        tcb = self.tcb
        stats = self.host.stats
        stats.inc("tcp.icmp_errors")
        if itype == 3 and code == 4:
            # RFC 1191: fragmentation needed; shrink the MSS (never below a 552-byte path MTU).
            mtu = max(extra if extra else 576, 552)
            base = min(mtu - headers_len(self.remote_addr), self._own_mss)
            if base < tcb.mss_base:
                tcb.mss_base = base
                tcb.snd_mss = base - (12 if tcb.ts_ok else 0)
                self.sender.cc.lower_mss(tcb.snd_mss)
                stats.inc("tcp.pmtu_reductions")
                if now is not None and tcb.state in SYNCHRONIZED and tcb.snd_max != tcb.snd_una:
                    self.sender.retransmit_head(now)
            return
        err = error_to_oserror(itype, code)
        if tcb.state == SYN_SENT and itype == 3:
            self._fail(err)
        else:
            self._soft_error = err

    # -- timeouts (RFC 9293 3.10.8) --------------------------------------

    def _on_rtx_timer(self, now: float) -> None:
        tcb = self.tcb
        st = tcb.state
        if st == SYN_SENT or st == SYN_RECEIVED:
            cfg = self.config
            limit = cfg.syn_retries if st == SYN_SENT and not self.passive else cfg.synack_retries
            if not self.sender.syn_timeout(limit):
                if self.passive:
                    self.host.stats.inc("tcp.synack_timeouts")
                    self.terminate()
                else:
                    self._fail(self._timeout_error())
                return
            self._syn_retransmitted = True
            self._send_syn(SYN if st == SYN_SENT else SYN | ACK, now)
            return
        if tcb.snd_max == tcb.snd_una or st == TIME_WAIT:
            return
        if self.orphaned and self.sender.timer_is_rto and self._orphan_gives_up(now):
            return
        if not self.sender.retransmit_timeout(now):
            self._fail(self._timeout_error())
            return
        self._notify()

    def sender_timer(self, name: str):
        """The sender's persist, cork or pacing timer (``name``: its slot), made on its first arm."""
        return self.host.timers.timer(_SENDER_TIMERS[name], self)

    def _on_persist_timer(self, now: float) -> None:
        sender = self.sender
        if not sender.persist_pending():
            return
        if self.orphaned and self._orphan_gives_up(now):
            return
        if not sender.persist_timeout(now):
            self._fail(self._timeout_error())
            return
        self._notify()

    def _on_delack_timer(self, now: float) -> None:
        if self.receiver.delack_fired(now):
            self.out.send_ack(now)

    def _on_cork_timer(self, now: float) -> None:
        if self.sender.cork_timeout(now):
            self._notify()

    def _on_pace_timer(self, now: float) -> None:
        if self.sender.pace_timeout(now):
            self._notify()

    def _on_keepalive_timer(self, now: float) -> None:
        cfg = self.config
        tcb = self.tcb
        if not cfg.keepalive or tcb.state not in (ESTABLISHED, CLOSE_WAIT):
            return
        if self._keep_probes == 0:
            due = self._last_rcv + cfg.keepidle
            if now < due:
                self._keepalive().arm(due)
                return
        if self.sender.busy:
            self._keepalive().arm(now + cfg.keepidle)  # data in flight: the RTO watches the peer
            return
        if self._keep_probes >= cfg.keepcnt:
            self.host.stats.inc("tcp.keepalive_timeouts")
            self.out.send_rst(now, tcb.snd_max, tcb.rcv_nxt)
            self._fail(TimeoutError(errno.ETIMEDOUT, "Connection timed out (keepalive)"))
            return
        # A probe: SEG.SEQ = SND.UNA - 1, no data (RFC 1122 4.2.3.6); the peer answers with an ACK.
        self._keep_probes += 1
        self.host.stats.inc("tcp.keepalive_probes")
        self.out.emit(seq_add(tcb.snd_una, -1), ACK, now)
        self._keepalive().arm(now + cfg.keepintvl)

    def _on_close_timer(self, now: float) -> None:
        if self.tcb.state == FIN_WAIT_2:
            self.terminate()

    def _recharge(self) -> None:
        """Charge what the buffers hold now to the layer's memory budget (send + receive + out of order)."""
        if self._charged < 0:
            return
        rcvbuf = self.receiver.rcvbuf
        held = len(self.sender.sndbuf) + len(rcvbuf) + rcvbuf.ooo_bytes + rcvbuf.lent
        if held != self._charged:
            self.layer.charge(held - self._charged)
            self._charged = held


def _final_ack(conn: Connection, seg, payload) -> bool:
    """LAST-ACK's last segment in its one common form, taken as the general path takes it; False
    (nothing changed) for any other segment.

    The form: ACK alone (no other flag, no data) at exactly RCV.NXT, acknowledging everything we sent
    (SEG.ACK = SND.MAX, our FIN included), its TSval not older than TS.Recent when timestamps are on.
    Every check of ``_synchronized_arrives`` passes for it and its only effect is the fifth step's in
    LAST-ACK (``_process_ack``): "If our FIN is now acknowledged, delete the TCB, enter the CLOSED
    state, and return" (RFC 9293 3.10.7.4). ``tests/tcp/test_tcp_close.py`` holds it to the general
    path's result.
    """
    if seg.flags != ACK or payload:
        return False
    tcb = conn.tcb
    ack = seg.ack
    if seg.seq != tcb.rcv_nxt or ack != tcb.snd_max:
        return False
    sender = conn.sender
    queued = len(sender.sndbuf)
    if seq_diff(ack, tcb.snd_una) <= queued:
        return False  # our FIN is not covered (not sent yet)
    if tcb.ts_ok:
        ts = seg.timestamps
        if ts is None or seq_lt(ts[0], tcb.ts_recent):
            return False
    sender.bytes_acked += queued
    tcb.snd_una = ack
    tcb.fin_acked = True
    conn.terminate()
    return True


def _peer_fin(conn: Connection, seg, payload, now: float) -> bool:
    """The peer's FIN in its one common form, in a state that receives (ESTABLISHED, FIN-WAIT-1 or
    -2), taken as ``_synchronized_arrives`` takes it; False (nothing changed) for any other segment.

    The form: FIN and ACK alone (no other flag, no data) at exactly RCV.NXT, acknowledging everything
    we sent (SEG.ACK = SND.MAX), its TSval not older than TS.Recent when timestamps are on. Every
    check before the fifth step passes for it (RFC 9293 3.10.7.4: acceptable at RCV.NXT even in a
    zero window, as the general path finds; no RST, no SYN), so what is left are the ACK's effects
    (``_process_ack``, which cannot drop an ACK of exactly SND.MAX here), TS.Recent (RFC 7323 4.3),
    the FIN (eighth step) and what the general path sends after it. ``tests/tcp/test_tcp_close.py``
    holds it to the general path's result.
    """
    if seg.flags != _FIN_ACK or payload:
        return False
    tcb = conn.tcb
    seq = seg.seq
    if seq != tcb.rcv_nxt or seg.ack != tcb.snd_max or tcb.fin_rcvd:
        return False
    ts = seg.timestamps
    if tcb.ts_ok and (ts is None or seq_lt(ts[0], tcb.ts_recent)):
        return False
    if not conn._process_ack(seg, 0, now):  # (never for SEG.ACK = SND.MAX in these states)
        return True
    if tcb.ts_ok and seq_le(seq, tcb.last_ack_sent) and seq_ge(ts[0], tcb.ts_recent):
        tcb.ts_recent = ts[0]
        tcb.ts_recent_age = now
    conn._fin_arrives(now)
    if tcb.state != CLOSED:
        conn.sender.output(now)
        if conn.receiver.ack_now:
            conn.out.send_ack(now)
    return True


_FIN_ACK = FIN | ACK
# The callbacks of the sender's lazily made timers (``Connection.sender_timer``), by slot name.
_SENDER_TIMERS = {"persist_timer": Connection._on_persist_timer, "cork_timer": Connection._on_cork_timer,
                  "pace_timer": Connection._on_pace_timer}


def _unlinked(now: float) -> None:
    """What an unlinked timer of a closed connection does if it ever fires: nothing."""


def _nothing() -> None:
    """The send low-water and receive high-water callbacks of a closed connection."""


def _fmt(addr: bytes, port: int) -> str:
    return f"{'.'.join(str(b) for b in addr)}:{port}" if len(addr) == 4 else f"{addr.hex()}:{port}"
