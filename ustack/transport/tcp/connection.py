"""A TCP connection: the RFC 9293 state machine's user side, timers and lifecycle.

``Connection`` combines ``SegmentInput`` (segment arrival),
``SegmentOutput`` (sending) and ``SackSender`` (SACK loss recovery) with
what the user calls: ``send``, ``recv``, ``recv_into``, ``shutdown``,
``close``, ``abort``, ``info``, knobs and callbacks. Connections are made
by ``TcpLayer.connect`` (active open) and by a ``Listener`` (passive open);
the layer owns them.

User calls that produce segments (``send``, ``shutdown``, ``close``, a read
that opens the window) do not need the time: they mark the connection
dirty and ``TcpLayer.flush(now)`` (run by the stack once per poll round)
sends. Passing ``now=`` flushes at once.

Timers (one ``Timer`` each on the host's heap): retransmission (RFC 6298;
also SYN and SYN-ACK), persist (zero-window probes), delayed ACK, keepalive
(RFC 1122 4.2.3.6, idle/interval/count), and a close timer for TIME-WAIT
(2 MSL) and the FIN-WAIT-2 timeout of closed connections.

Errors: a reset, refusal or timeout sets ``error`` (ConnectionResetError,
ConnectionRefusedError, TimeoutError) and closes the connection. The error
is raised once by the next ``recv``/``send`` (or taken by ``take_error``,
like SO_ERROR); after that ``recv`` returns b"" and ``send`` raises
BrokenPipeError. Data received before a reset stays readable.
"""

from __future__ import annotations

import errno
import socket

from ustack.transport.tcp import congestion
from ustack.transport.tcp.config import TcpConfig
from ustack.transport.tcp.info import TcpInfo
from ustack.transport.tcp.input import SegmentInput
from ustack.transport.tcp.isn import timestamp_offset
from ustack.transport.tcp.output import SegmentOutput
from ustack.transport.tcp.recvbuf import ReceiveBuffer
from ustack.transport.tcp.rtt import RttEstimator
from ustack.transport.tcp.sack import SackSender, Scoreboard
from ustack.transport.tcp.sendbuf import SendBuffer
from ustack.transport.tcp.seq import seq_add, seq_diff
from ustack.transport.tcp.tcb import SYNCHRONIZED, State, Tcb
from ustack.wire.icmp import error_to_oserror
from ustack.wire.tcp import ACK

_NEG_INF = float("-inf")


def window_shift_for(rcvbuf: int) -> int:
    """The smallest window scale that lets the 16-bit field cover ``rcvbuf`` (RFC 7323 2.3, max 14)."""
    shift = 0
    while shift < 14 and (rcvbuf >> shift) > 0xFFFF:
        shift += 1
    return shift


class Connection(SegmentInput, SegmentOutput, SackSender):
    """One TCP connection (see the module docstring)."""

    __slots__ = (
        "layer", "host", "config", "tcb", "sndbuf", "rcvbuf", "rtt", "cc",
        "local_addr", "local_port", "remote_addr", "remote_port", "key",
        "listener", "passive", "accepted",
        "error", "_pending_error", "rd_shutdown", "wr_shutdown", "orphaned",
        "on_event", "on_send_low_water", "on_recv_high_water", "_send_low", "_recv_high",
        "_rtx_timer", "_persist_timer", "_delack_timer", "_keepalive_timer", "_close_timer",
        "_rtx_count", "_persist_backoff", "_keep_probes", "_rtt_seq", "_rtt_time", "_syn_time",
        "_syn_retransmitted", "_ack_now", "_unacked", "_force", "_last_challenge", "_last_rcv",
        "_offer_ws", "_offer_ts", "_offer_sack", "_own_mss", "_dirty", "_wnd_update", "_soft_error",
        "_board", "_high_rxt", "_rescue_rxt", "_probes_out",
        "retransmits", "timeouts", "fast_retransmits", "dup_acks", "window_probes", "segs_in", "segs_out",
        "bytes_acked", "bytes_received", "challenge_acks", "_fast_output",
    )

    def __init__(self, layer, config: TcpConfig, local: tuple, remote: tuple, listener=None):
        self.layer = layer
        host = self.host = layer.host
        self.config = config
        self.tcb = Tcb()
        self.local_addr, self.local_port = bytes(local[0]), local[1]
        self.remote_addr, self.remote_port = bytes(remote[0]), remote[1]
        self.key = (self.local_addr, self.local_port, self.remote_addr, self.remote_port)
        self.listener = listener
        self.passive = listener is not None
        self.accepted = False
        self.sndbuf = SendBuffer(config.sndbuf)
        self.rcvbuf = ReceiveBuffer(config.rcvbuf, config.max_ooo_runs)
        self.rtt = RttEstimator(config.initial_rto, config.min_rto, config.max_rto)
        own_mss = host.route_mtu(self.remote_addr) - 40
        if config.mss:
            own_mss = min(own_mss, config.mss)
        self._own_mss = max(own_mss, 88)
        self.cc = congestion.make(config.congestion, min(self._own_mss, 536))
        self.error = None
        self._pending_error = None
        self.rd_shutdown = False
        self.wr_shutdown = False
        self.orphaned = False
        self.on_event = None
        self.on_send_low_water = None
        self.on_recv_high_water = None
        self._set_water_marks()
        timers = host.timers
        self._rtx_timer = timers.timer(self._on_rtx_timer)
        self._persist_timer = timers.timer(self._on_persist_timer)
        self._delack_timer = timers.timer(self._on_delack_timer)
        self._keepalive_timer = timers.timer(self._on_keepalive_timer)
        self._close_timer = timers.timer(self._on_close_timer)
        self._rtx_count = 0
        self._persist_backoff = 0
        self._keep_probes = 0
        self._rtt_seq = None
        self._rtt_time = 0.0
        self._syn_time = 0.0
        self._syn_retransmitted = False
        self._ack_now = False
        self._unacked = 0
        self._force = False
        self._last_challenge = _NEG_INF
        self._last_rcv = 0.0
        self._offer_ws = config.window_scaling
        self._offer_ts = config.timestamps
        self._offer_sack = config.sack
        self._dirty = False
        self._wnd_update = False
        # The host's direct-to-TX-slot emitter for established segments, when it has one (see TcpHost).
        self._fast_output = getattr(host, "tcp_output_segment", None)
        self._soft_error = None
        self._board = Scoreboard()
        self._high_rxt = 0
        self._rescue_rxt = None
        self._probes_out = 0
        self.retransmits = self.timeouts = self.fast_retransmits = self.dup_acks = self.window_probes = 0
        self.segs_in = self.segs_out = self.bytes_acked = self.bytes_received = self.challenge_acks = 0
        tcb = self.tcb
        tcb.rcv_wscale = window_shift_for(config.rcvbuf) if config.window_scaling else 0
        tcb.ts_offset = timestamp_offset(host.isn_secret, *self.key)

    def __repr__(self) -> str:
        return (f"<Connection {_fmt(self.local_addr, self.local_port)} -> "
                f"{_fmt(self.remote_addr, self.remote_port)} {self.tcb.state.name}>")

    # -- opening ---------------------------------------------------------

    def _open_active(self, now: float) -> None:
        """Active OPEN (RFC 9293 3.10.1): send the SYN, enter SYN-SENT."""
        tcb = self.tcb
        tcb.iss = self.layer._isn(self.key, now)
        tcb.snd_una = tcb.iss
        tcb.state = State.SYN_SENT
        self._syn_time = now
        self._last_rcv = now
        self._send_syn(now)
        self.host.stats.inc("tcp.active_opens")

    def _open_passive(self, hdr, now: float) -> None:
        """A SYN reached a listener (RFC 9293 3.10.7.2): enter SYN-RECEIVED, send the SYN-ACK."""
        tcb = self.tcb
        tcb.irs = hdr.seq
        tcb.rcv_nxt = seq_add(hdr.seq, 1)
        tcb.last_ack_sent = tcb.rcv_nxt
        tcb.iss = self.layer._isn(self.key, now)
        tcb.snd_una = tcb.iss
        self._negotiate(hdr, now)
        tcb.snd_wnd = hdr.window
        tcb.max_snd_wnd = hdr.window
        tcb.snd_wl1 = hdr.seq
        tcb.state = State.SYN_RECEIVED
        self._syn_time = now
        self._last_rcv = now
        self._send_synack(now)
        self.host.stats.inc("tcp.passive_opens")

    def _open_from_cookie(self, hdr, mss: int, peer_wscale, sack_ok: bool, now: float) -> None:
        """Rebuild a connection from a valid SYN-cookie ACK (RFC 4987 3.6): straight to ESTABLISHED."""
        tcb = self.tcb
        tcb.irs = seq_add(hdr.seq, -1)
        tcb.rcv_nxt = hdr.seq
        tcb.last_ack_sent = hdr.seq
        tcb.iss = seq_add(hdr.ack, -1)
        tcb.snd_una = tcb.snd_nxt = tcb.snd_max = hdr.ack
        tcb.mss_base = max(64, min(mss, self._own_mss))
        if peer_wscale is not None and self.config.window_scaling:
            tcb.snd_wscale = min(peer_wscale, 14)
        else:
            tcb.snd_wscale = tcb.rcv_wscale = 0
        ts = hdr.timestamps
        tcb.ts_ok = self.config.timestamps and ts is not None
        if tcb.ts_ok:
            tcb.ts_recent = ts[0]
            tcb.ts_recent_age = now
        tcb.sack_ok = self.config.sack and sack_ok
        self.cc.sack = tcb.sack_ok
        tcb.snd_mss = tcb.mss_base - (12 if tcb.ts_ok else 0)
        tcb.rcv_mss = min(tcb.snd_mss, 536)
        # The SYN-ACK advertised min(free, 65535) unscaled; assume that much is offered.
        tcb.rcv_adv = seq_add(tcb.rcv_nxt, min(self.rcvbuf.free, 0xFFFF))
        tcb.snd_wnd = hdr.window << tcb.snd_wscale
        tcb.max_snd_wnd = tcb.snd_wnd
        tcb.snd_wl1 = hdr.seq
        tcb.snd_wl2 = hdr.ack
        self._syn_time = now
        self._last_rcv = now
        self.host.stats.inc("tcp.passive_opens")
        self._become_established(now)  # no handshake RTT sample: the SYN-ACK time was not kept

    def _negotiate(self, hdr, now: float) -> None:
        """Options of the peer's SYN or SYN-ACK (RFC 9293 3.7.1, RFC 7323 2.2/3.2, RFC 2018)."""
        tcb = self.tcb
        peer_mss = hdr.mss or 536  # no MSS option: 536 (RFC 9293 3.7.1)
        tcb.mss_base = max(64, min(peer_mss, self._own_mss))
        if self._offer_ws and hdr.wscale is not None:
            tcb.snd_wscale = min(hdr.wscale, 14)  # RFC 7323 2.3: larger values are treated as 14
        else:
            self._offer_ws = False
            tcb.snd_wscale = tcb.rcv_wscale = 0
        if self._offer_ts and hdr.timestamps is not None:
            tcb.ts_ok = True
            tcb.ts_recent = hdr.timestamps[0]
            tcb.ts_recent_age = now
        else:
            self._offer_ts = False
        tcb.sack_ok = self._offer_sack and hdr.sack_permitted
        self._offer_sack = tcb.sack_ok
        tcb.snd_mss = tcb.mss_base - (12 if tcb.ts_ok else 0)
        tcb.rcv_mss = min(tcb.snd_mss, 536)
        self.cc.set_mss(tcb.snd_mss)
        self.cc.sack = tcb.sack_ok

    def _become_established(self, now: float) -> None:
        tcb = self.tcb
        self._rtx_timer.cancel()
        self._rtx_count = 0
        self.rtt.reset_backoff()
        if self._syn_retransmitted:
            self.rtt.set_floor(3.0)  # RFC 6298 5.7
        self.cc.set_mss(tcb.snd_mss)
        self._set_state(State.FIN_WAIT_1 if tcb.fin_queued else State.ESTABLISHED)
        self.host.stats.inc("tcp.established")
        if self.config.keepalive:
            self._keepalive_timer.arm(now + self.config.keepidle)
        if self.listener is not None:
            self.listener._child_established(self)

    # -- state changes ---------------------------------------------------

    def _set_state(self, state: State) -> None:
        self.tcb.state = state
        self._notify()

    def _enter_time_wait(self, now: float) -> None:
        for t in (self._rtx_timer, self._persist_timer, self._delack_timer, self._keepalive_timer):
            t.cancel()
        self._set_state(State.TIME_WAIT)
        self._close_timer.arm(now + 2 * self.config.msl)

    def _terminate(self) -> None:
        """Enter CLOSED and leave the layer (the TCB is deleted)."""
        tcb = self.tcb
        if tcb.state == State.CLOSED:
            return
        tcb.state = State.CLOSED
        for t in (self._rtx_timer, self._persist_timer, self._delack_timer, self._keepalive_timer,
                  self._close_timer):
            t.cancel()
        self.sndbuf.clear()
        self.layer._forget(self)
        if self.listener is not None:
            self.listener._child_gone(self)
        self._notify()

    def _fail(self, exc: OSError) -> None:
        self.error = exc
        self._pending_error = exc
        self.host.stats.inc("tcp.errors." + type(exc).__name__)
        self._terminate()

    def _notify(self) -> None:
        cb = self.on_event
        if cb is not None:
            cb(self)

    def _mark_dirty(self, now: float | None) -> None:
        if now is not None:
            self._flush(now)
        elif not self._dirty:
            self._dirty = True
            self.layer._dirty.append(self)

    def _flush(self, now: float) -> None:
        """Send what user calls left pending (data, FIN, a window update)."""
        self._dirty = False
        tcb = self.tcb
        if tcb.state == State.CLOSED:
            return
        self._output(now)
        if (self._wnd_update or self._ack_now) and tcb.state in SYNCHRONIZED:
            self._send_ack(now)

    # -- ICMP ------------------------------------------------------------

    def _icmp_error(self, itype: int, code: int, extra: int, now: float | None) -> None:
        """RFC 1122 4.2.3.9 / RFC 5927: most ICMP errors are soft (remembered, reported only if the
        connection then times out); in SYN-SENT a destination unreachable aborts the open."""
        tcb = self.tcb
        stats = self.host.stats
        stats.inc("tcp.icmp_errors")
        if itype == 3 and code == 4:
            # RFC 1191: fragmentation needed; shrink the MSS (never below a 552-byte path MTU).
            mtu = max(extra if extra else 576, 552)
            base = min(mtu - 40, self._own_mss)
            if base < tcb.mss_base:
                tcb.mss_base = base
                tcb.snd_mss = base - (12 if tcb.ts_ok else 0)
                self.cc.mss = tcb.snd_mss
                stats.inc("tcp.pmtu_reductions")
                if now is not None and tcb.state in SYNCHRONIZED and tcb.snd_max != tcb.snd_una:
                    self._retransmit_head(now)
            return
        err = error_to_oserror(itype, code)
        if tcb.state == State.SYN_SENT and itype == 3:
            self._fail(err)
        else:
            self._soft_error = err

    # -- timers ----------------------------------------------------------

    def _on_rtx_timer(self, now: float) -> None:
        tcb = self.tcb
        st = tcb.state
        cfg = self.config
        stats = self.host.stats
        if st == State.SYN_SENT or st == State.SYN_RECEIVED:
            limit = cfg.syn_retries if st == State.SYN_SENT and not self.passive else cfg.synack_retries
            if self._rtx_count >= limit:
                if self.passive:
                    stats.inc("tcp.synack_timeouts")
                    self._terminate()
                else:
                    self._fail(self._timeout_error())
                return
            self._rtx_count += 1
            self.timeouts += 1
            self.retransmits += 1
            self._syn_retransmitted = True
            self.rtt.backoff()
            stats.inc("tcp.retrans_segs")
            if st == State.SYN_SENT:
                self._send_syn(now)
            else:
                self._send_synack(now)
            return
        if tcb.snd_max == tcb.snd_una or st == State.TIME_WAIT:
            return
        if self._rtx_count >= cfg.max_retries:
            self._fail(self._timeout_error())
            return
        # RFC 6298 5.4-5.6, RFC 5681 3.1: retransmit the earliest segment, back off, go back N.
        self._rtx_count += 1
        self.timeouts += 1
        stats.inc("tcp.rto_expired")
        self.cc.on_rto(seq_diff(tcb.snd_max, tcb.snd_una), tcb.snd_max, now)
        self._board.clear()  # the receiver may renege (RFC 2018 8); go back N from SND.UNA
        self.rtt.backoff()
        self._rtt_seq = None  # Karn
        tcb.snd_nxt = tcb.snd_una
        self._output(now)
        if self._rtx_timer.deadline is None and tcb.snd_max != tcb.snd_una:
            self._rtx_timer.arm(now + self.rtt.rto)
        self._notify()

    def _timeout_error(self) -> OSError:
        """ETIMEDOUT, or the soft ICMP error that probably explains it (RFC 1122 4.2.3.9)."""
        return self._soft_error or TimeoutError(errno.ETIMEDOUT, "Connection timed out")

    def _on_keepalive_timer(self, now: float) -> None:
        cfg = self.config
        tcb = self.tcb
        if not cfg.keepalive or tcb.state not in (State.ESTABLISHED, State.CLOSE_WAIT):
            return
        if self._keep_probes == 0:
            due = self._last_rcv + cfg.keepidle
            if now < due:
                self._keepalive_timer.arm(due)
                return
        if tcb.snd_max != tcb.snd_una or self._persist_timer.deadline is not None:
            self._keepalive_timer.arm(now + cfg.keepidle)  # data in flight: the RTO watches the peer
            return
        if self._keep_probes >= cfg.keepcnt:
            self.host.stats.inc("tcp.keepalive_timeouts")
            self._reply_rst(tcb.snd_max, tcb.rcv_nxt)
            self._fail(TimeoutError(errno.ETIMEDOUT, "Connection timed out (keepalive)"))
            return
        # A probe: SEG.SEQ = SND.NXT - 1, no data (RFC 1122 4.2.3.6); the peer answers with an ACK.
        self._keep_probes += 1
        self.host.stats.inc("tcp.keepalive_probes")
        self._emit(seq_add(tcb.snd_una, -1), ACK, now)
        self._keepalive_timer.arm(now + cfg.keepintvl)

    def _on_close_timer(self, now: float) -> None:
        if self.tcb.state in (State.TIME_WAIT, State.FIN_WAIT_2):
            self._terminate()

    # -- user calls ------------------------------------------------------

    @property
    def state(self) -> State:
        return self.tcb.state

    @property
    def local(self) -> tuple:
        return (self.local_addr, self.local_port)

    @property
    def remote(self) -> tuple:
        return (self.remote_addr, self.remote_port)

    @property
    def eof(self) -> bool:
        """The peer's FIN (or our SHUT_RD) has been reached and every byte before it was read."""
        return (self.tcb.fin_rcvd or self.rd_shutdown) and not len(self.rcvbuf)

    @property
    def readable(self) -> bool:
        """``recv`` would not come back empty-handed for lack of data: data, EOF, an error, or closed."""
        return bool(len(self.rcvbuf)) or self.eof or self._pending_error is not None or self.tcb.state == State.CLOSED

    @property
    def writable(self) -> bool:
        """``send`` would take bytes now (or raise at once)."""
        st = self.tcb.state
        if self._pending_error is not None or st == State.CLOSED or self.wr_shutdown:
            return True
        return st in (State.ESTABLISHED, State.CLOSE_WAIT) and self.sndbuf.free > 0

    @property
    def connected(self) -> bool:
        return self.tcb.state in SYNCHRONIZED

    def take_error(self) -> OSError | None:
        """The pending error, cleared (SO_ERROR)."""
        exc, self._pending_error = self._pending_error, None
        return exc

    def send(self, data, now: float | None = None) -> int:
        """Queue bytes; returns how many the send buffer took (0 when full)."""
        if self._pending_error is not None:
            raise self.take_error()
        st = self.tcb.state
        if self.wr_shutdown or st not in (State.SYN_SENT, State.SYN_RECEIVED, State.ESTABLISHED, State.CLOSE_WAIT):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        n = self.sndbuf.write(data)
        if n and st in (State.ESTABLISHED, State.CLOSE_WAIT):
            self._mark_dirty(now)
        return n

    def recv(self, n: int, now: float | None = None) -> bytes:
        """Up to ``n`` bytes; b"" when nothing is ready (see ``eof``); raises a pending error once."""
        rcvbuf = self.rcvbuf
        if not len(rcvbuf) or n <= 0:
            if self._pending_error is not None and n > 0:
                raise self.take_error()
            return b""
        data = rcvbuf.read(n)
        self._after_read(now)
        return data

    def recv_into(self, buf, now: float | None = None) -> int:
        rcvbuf = self.rcvbuf
        if not len(rcvbuf):
            if self._pending_error is not None and len(buf):
                raise self.take_error()
            return 0
        n = rcvbuf.read_into(buf)
        self._after_read(now)
        return n

    def _after_read(self, now: float | None) -> None:
        """Send a window update when reading opened the window usefully (RFC 9293 3.8.6.2.2)."""
        tcb = self.tcb
        if tcb.state not in (State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2):
            return
        cur = seq_diff(tcb.rcv_adv, tcb.rcv_nxt)
        cap = self.rcvbuf.capacity
        if cur <= cap // 2 and self.rcvbuf.free - cur >= min(cap // 2, tcb.mss_base):
            self._wnd_update = True
            self._mark_dirty(now)

    def shutdown(self, how: int, now: float | None = None) -> None:
        """SHUT_RD, SHUT_WR or SHUT_RDWR (values of the socket module)."""
        if how not in (socket.SHUT_RD, socket.SHUT_WR, socket.SHUT_RDWR):
            raise ValueError(f"bad shutdown how {how}")
        if how in (socket.SHUT_RD, socket.SHUT_RDWR):
            self.rd_shutdown = True
            self.rcvbuf.read(len(self.rcvbuf))
        if how in (socket.SHUT_WR, socket.SHUT_RDWR) and not self.wr_shutdown:
            self.wr_shutdown = True
            self._close_send(now)

    def _close_send(self, now: float | None) -> None:
        """CLOSE of the sending direction (RFC 9293 3.10.4): queue a FIN after the data."""
        tcb = self.tcb
        st = tcb.state
        if st in (State.SYN_SENT, State.SYN_RECEIVED):
            tcb.fin_queued = True  # sent once established
        elif st == State.ESTABLISHED:
            tcb.fin_queued = True
            self._set_state(State.FIN_WAIT_1)
            self._mark_dirty(now)
        elif st == State.CLOSE_WAIT:
            tcb.fin_queued = True
            self._set_state(State.LAST_ACK)
            self._mark_dirty(now)

    def close(self, now: float | None = None) -> None:
        """Close both directions and give the connection up; it finishes (FIN, TIME-WAIT) on its own."""
        tcb = self.tcb
        st = tcb.state
        self.orphaned = True
        if st == State.CLOSED:
            return
        if st == State.SYN_SENT:
            self._terminate()
            return
        if len(self.rcvbuf) and st in SYNCHRONIZED:
            # Unread data: abort with a RST (RFC 1122 4.2.2.13, RFC 2525 2.17).
            self.host.stats.inc("tcp.close_with_unread_data")
            self.abort()
            return
        self.shutdown(socket.SHUT_RDWR, now)
        if tcb.state == State.FIN_WAIT_2:
            t = now if now is not None else self._last_rcv
            self._close_timer.arm(t + self.config.fin_wait2_timeout)

    def abort(self) -> None:
        """ABORT (RFC 9293 3.10.5): RST the peer when synchronized, delete the TCB at once."""
        tcb = self.tcb
        self.orphaned = True
        if tcb.state in (State.SYN_RECEIVED, State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2,
                         State.CLOSE_WAIT):
            self._reply_rst(tcb.snd_max, tcb.rcv_nxt)
        self.rcvbuf.clear()
        self._terminate()

    # -- knobs, water marks, info ----------------------------------------

    def _set_water_marks(self) -> None:
        cfg = self.config
        self._send_low = cfg.send_low_water if cfg.send_low_water is not None else cfg.sndbuf // 2
        self._recv_high = cfg.recv_high_water if cfg.recv_high_water is not None else cfg.rcvbuf // 2

    @property
    def nodelay(self) -> bool:
        return self.config.nodelay

    @nodelay.setter
    def nodelay(self, value: bool) -> None:
        self.configure(nodelay=bool(value))

    def configure(self, now: float | None = None, **knobs) -> None:
        """Change per-connection knobs (``TcpConfig`` names) on a live connection.

        The window scale was fixed by the handshake, so a larger ``rcvbuf``
        can only be advertised up to 65535 << rcv_wscale.
        """
        cfg = self.config = self.config.derive(**knobs)
        self.sndbuf.capacity = cfg.sndbuf
        self.rcvbuf.capacity = cfg.rcvbuf
        self.rcvbuf.max_runs = cfg.max_ooo_runs
        self.rtt.min_rto, self.rtt.max_rto = cfg.min_rto, cfg.max_rto
        self._set_water_marks()
        if "congestion" in knobs and knobs["congestion"] != getattr(self.cc, "name", None):
            old = self.cc
            self.cc = congestion.make(cfg.congestion, self.tcb.snd_mss, self.tcb.iss)
            self.cc.cwnd, self.cc.ssthresh, self.cc.recover = old.cwnd, old.ssthresh, old.recover
            self.cc.sack = self.tcb.sack_ok
        if cfg.keepalive and self.tcb.state in (State.ESTABLISHED, State.CLOSE_WAIT):
            base = now if now is not None else self._last_rcv
            self._keepalive_timer.arm(base + cfg.keepidle)
        elif not cfg.keepalive:
            self._keepalive_timer.cancel()
        if knobs.get("nodelay"):
            self._mark_dirty(now)

    def info(self) -> TcpInfo:
        tcb = self.tcb
        rtt = self.rtt
        cc = self.cc
        sent = seq_diff(tcb.snd_nxt, tcb.snd_una)
        return TcpInfo(
            state=tcb.state.name, local=self.local, remote=self.remote,
            snd_una=tcb.snd_una, snd_nxt=tcb.snd_nxt, snd_max=tcb.snd_max, rcv_nxt=tcb.rcv_nxt,
            snd_wnd=tcb.snd_wnd, rcv_wnd=tcb.rcv_wnd, cwnd=cc.window, ssthresh=cc.ssthresh,
            srtt=rtt.srtt, rttvar=rtt.rttvar, rto=rtt.rto, retransmits=self.retransmits, timeouts=self.timeouts,
            backoff=rtt.backoffs, fast_retransmits=self.fast_retransmits, dup_acks=self.dup_acks,
            bytes_in_flight=max(0, seq_diff(tcb.snd_max, tcb.snd_una)),
            send_queue=len(self.sndbuf), unsent=max(0, len(self.sndbuf) - max(sent, 0)),
            recv_queue=len(self.rcvbuf), ooo_bytes=self.rcvbuf.ooo_bytes,
            snd_mss=tcb.snd_mss, rcv_mss=tcb.rcv_mss, snd_wscale=tcb.snd_wscale, rcv_wscale=tcb.rcv_wscale,
            timestamps=tcb.ts_ok, sack=tcb.sack_ok, congestion=getattr(cc, "name", type(cc).__name__),
            in_recovery=bool(getattr(cc, "in_recovery", False)), segs_in=self.segs_in, segs_out=self.segs_out,
            bytes_acked=self.bytes_acked, bytes_received=self.bytes_received, challenge_acks=self.challenge_acks,
        )


def _fmt(addr: bytes, port: int) -> str:
    return f"{'.'.join(str(b) for b in addr)}:{port}" if len(addr) == 4 else f"{addr.hex()}:{port}"

