"""The user calls of a TCP connection (RFC 9293 3.10.2 SEND to 3.10.6 STATUS), as a base of ``Connection``.

SEND (``send``, and ``send_reserve``/``send_commit`` for zero-copy), RECEIVE
(``recv``, ``recv_into``, and ``recv_views``/``return_views`` for lent
views), CLOSE (``shutdown``, ``close``), ABORT (``abort``) and STATUS (the
state properties, ``take_error``, ``info``), with the per-connection knobs
(``configure``, ``nodelay``, TCP_QUICKACK) and the bookkeeping of orphans
(connections closed by the user that still deliver; Linux's
tcp_max_orphans and tcp_orphan_retries).

The class holds no state of its own (``__slots__ = ()``): every field is
the ``Connection``'s (connection.py), and what these calls do to the wire
happens at the layer's next flush unless ``now=`` is given.
"""

from __future__ import annotations

import errno
import socket

from ustack.transport.tcp.config import PRESSURE_MIN
from ustack.transport.tcp.info import TcpInfo, connection_info
from ustack.transport.tcp.recvbuf import LentViews
from ustack.transport.tcp.tcb import (CLOSE_WAIT, CLOSED, CLOSING, ESTABLISHED, FIN_WAIT_1, FIN_WAIT_2, LAST_ACK,
                                      SYN_RECEIVED, SYN_SENT, SYNCHRONIZED, TIME_WAIT, State)


class UserCalls:
    """SEND, RECEIVE, CLOSE, ABORT and STATUS of ``Connection`` (see the module docstring)."""

    __slots__ = ()

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
    def rd_shutdown(self) -> bool:
        return self.receiver.rd_shutdown

    @property
    def eof(self) -> bool:
        """The peer's FIN (or our SHUT_RD) has been reached and every byte before it was read."""
        receiver = self.receiver
        return (self.tcb.fin_rcvd or receiver.rd_shutdown) and not len(receiver.rcvbuf)

    @property
    def readable(self) -> bool:
        """``recv`` would not come back empty-handed for lack of data: data, EOF, an error, or closed."""
        return (bool(len(self.receiver.rcvbuf)) or self.eof or self._pending_error is not None
                or self.tcb.state == CLOSED)

    @property
    def writable(self) -> bool:
        """``send`` would take bytes now (or raise at once)."""
        st = self.tcb.state
        if self._pending_error is not None or st == CLOSED or self.wr_shutdown:
            return True
        return st in (ESTABLISHED, CLOSE_WAIT) and self.sender.sndbuf.free > 0 and self._send_room() > 0

    def _send_room(self) -> int:
        """Bytes the memory budget lets ``send`` queue now: what the hard level leaves, and under
        soft pressure no more than brings the send buffer to PRESSURE_MIN (config.py)."""
        layer = self.layer
        room = layer.mem_room()
        if layer.under_pressure:
            room = min(room, PRESSURE_MIN - len(self.sender.sndbuf))
        return room

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
        if self.wr_shutdown or st not in (SYN_SENT, SYN_RECEIVED, ESTABLISHED, CLOSE_WAIT):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        room = self._send_room()
        if room < len(data):
            self.host.stats.inc("tcp.mem_pressure_send")
            data = memoryview(data)[: max(room, 0)]
        n = self.sender.sndbuf.write(data)
        self._recharge()
        if n and st in (ESTABLISHED, CLOSE_WAIT):
            self._mark_dirty(now)
        return n

    def send_reserve(self, n: int) -> memoryview:
        """Zero-copy send, step 1: a writable view of up to ``n`` bytes inside the send buffer (contiguous,
        so possibly shorter; empty when full). Fill it, then ``send_commit``. Raises as ``send`` does."""
        if self._pending_error is not None:
            raise self.take_error()
        st = self.tcb.state
        if self.wr_shutdown or st not in (State.SYN_SENT, State.SYN_RECEIVED, State.ESTABLISHED, State.CLOSE_WAIT):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        room = self._send_room()
        if room < n:
            self.host.stats.inc("tcp.mem_pressure_send")
            n = max(room, 0)
        return self.sender.sndbuf.reserve(n)

    def send_commit(self, n: int, now: float | None = None) -> int:
        """Zero-copy send, step 2: queue the first ``n`` bytes written into the reservation (no copy);
        the reservation's view is released. ``n`` = 0 gives it back."""
        n = self.sender.sndbuf.commit(n)
        self._recharge()
        if n and self.tcb.state in (State.ESTABLISHED, State.CLOSE_WAIT):
            self._mark_dirty(now)
        return n

    def recv(self, n: int, now: float | None = None) -> bytes:
        """Up to ``n`` bytes; b"" when nothing is ready (see ``eof``); raises a pending error once."""
        receiver = self.receiver
        rcvbuf = receiver.rcvbuf
        if not len(rcvbuf) or n <= 0:
            if self._pending_error is not None and n > 0:
                raise self.take_error()
            return b""
        data = rcvbuf.read(n)
        self._recharge()
        if receiver.after_read(now):
            self._mark_dirty(now)
        return data

    def recv_into(self, buf, now: float | None = None) -> int:
        receiver = self.receiver
        rcvbuf = receiver.rcvbuf
        if not len(rcvbuf):
            if self._pending_error is not None and len(buf):
                raise self.take_error()
            return 0
        n = rcvbuf.read_into(buf)
        self._recharge()
        if receiver.after_read(now):
            self._mark_dirty(now)
        return n

    def recv_views(self, n: int, now: float | None = None) -> LentViews:
        """Zero-copy receive: up to ``n`` readable bytes lent as views (``LentViews``; empty when nothing
        is ready, see ``eof``); raises a pending error once. The bytes keep counting against the window
        and the memory budget until ``LentViews.release()`` (``return_views``)."""
        receiver = self.receiver
        rcvbuf = receiver.rcvbuf
        if not len(rcvbuf) or n <= 0:
            if self._pending_error is not None and n > 0:
                raise self.take_error()
            return LentViews([], [], 0, None)
        views, frames, k = rcvbuf.lend(n)
        self._recharge()
        if receiver.after_read(now):
            self._mark_dirty(now)
        return LentViews(views, frames, k, self.return_views)

    def return_views(self, lent: LentViews, now: float | None = None) -> None:
        """The application released views lent by ``recv_views``: their frames go back, the window opens."""
        receiver = self.receiver
        receiver.rcvbuf.unlend(lent.nbytes, lent.frames)
        self._recharge()
        if receiver.after_read(now):
            self._mark_dirty(now)

    def shutdown(self, how: int, now: float | None = None) -> None:
        """SHUT_RD, SHUT_WR or SHUT_RDWR (values of the socket module)."""
        if how not in (socket.SHUT_RD, socket.SHUT_WR, socket.SHUT_RDWR):
            raise ValueError(f"bad shutdown how {how}")
        if how in (socket.SHUT_RD, socket.SHUT_RDWR):
            self.receiver.shutdown()
        if how in (socket.SHUT_WR, socket.SHUT_RDWR) and not self.wr_shutdown:
            self.wr_shutdown = True
            self._close_send(now)

    def _close_send(self, now: float | None) -> None:
        """CLOSE of the sending direction (RFC 9293 3.10.4): queue a FIN after the data."""
        tcb = self.tcb
        st = tcb.state
        if st in (SYN_SENT, SYN_RECEIVED):
            tcb.fin_queued = True  # sent once established
        elif st == ESTABLISHED:
            tcb.fin_queued = True
            self._set_state(FIN_WAIT_1)
            self._mark_dirty(now)
        elif st == CLOSE_WAIT:
            tcb.fin_queued = True
            self._set_state(LAST_ACK)
            self._mark_dirty(now)

    def close(self, now: float | None = None) -> None:
        """Close both directions and give the connection up; it finishes (FIN, TIME-WAIT) on its own."""
        tcb = self.tcb
        st = tcb.state
        self.orphaned = True
        if st == CLOSED:
            return
        if st == SYN_SENT:
            self.terminate()
            return
        if len(self.receiver.rcvbuf) and st in SYNCHRONIZED:
            # Unread data: abort with a RST (RFC 1122 4.2.2.13, RFC 2525 2.17).
            self.host.stats.inc("tcp.close_with_unread_data")
            self.abort(now)
            return
        self.shutdown(socket.SHUT_RDWR, now)
        if tcb.state == FIN_WAIT_2:
            t = now if now is not None else self._last_rcv
            self._closer().arm(t + self.config.fin_wait2_timeout)
        if tcb.state not in (CLOSED, TIME_WAIT) and not self._orphan_counted:
            layer = self.layer
            if layer.orphans >= layer.config.max_orphans:
                # Linux tcp_max_orphans: "too many orphaned sockets", reset at once.
                self.host.stats.inc("tcp.orphans_over_limit")
                self._orphan_reset(now)
                return
            self._orphan_counted = True
            self._orphan_una = tcb.snd_una
            layer.orphans += 1

    def abort(self, now: float | None = None) -> None:
        """ABORT (RFC 9293 3.10.5): RST the peer when synchronized, delete the TCB at once.

        Without ``now`` the RST leaves at the layer's next ``flush(now)``, like
        every segment a time-less user call produces.
        """
        tcb = self.tcb
        self.orphaned = True
        if tcb.state in (SYN_RECEIVED, ESTABLISHED, FIN_WAIT_1, FIN_WAIT_2,
                         CLOSE_WAIT):
            self._reset_peer(now)
        self.receiver.rcvbuf.clear()
        self.terminate()

    # -- orphans (closed by the user, still delivering) ---------------------

    def _orphan_gives_up(self, now: float) -> bool:
        """A retransmission or persist timer of an orphan expired: True when it was reset and freed.

        Linux's tcp_orphan_retries: ``orphan_retries`` expiries in a row
        without SND.UNA moving (a probe answered with a zero window counts:
        the peer that never reads must not pin our memory) end it.
        """
        if self.tcb.state not in (FIN_WAIT_1, CLOSING, LAST_ACK):
            return False
        una = self.tcb.snd_una
        if una != self._orphan_una:
            self._orphan_una = una
            self._orphan_probes = 0
        self._orphan_probes += 1
        if self._orphan_probes <= self.config.orphan_retries:
            return False
        self.host.stats.inc("tcp.orphan_retries_exceeded")
        self._orphan_reset(now)
        return True

    def _orphan_reset(self, now: float | None) -> None:
        """Reset the peer and delete the TCB with its buffers (an orphan over a limit)."""
        tcb = self.tcb
        if tcb.state in SYNCHRONIZED and tcb.state != TIME_WAIT:
            self._reset_peer(now)
        self.receiver.rcvbuf.clear()
        self.terminate()

    def _reset_peer(self, now: float | None) -> None:
        """<SEQ=SND.MAX><ACK=RCV.NXT><CTL=RST,ACK> now, or at the layer's next flush without ``now``."""
        tcb = self.tcb
        if now is None:
            self.layer.defer_reset(self.local_addr, self.remote_addr, self.local_port, self.remote_port,
                                   tcb.snd_max, tcb.rcv_nxt)
        else:
            self.out.send_rst(now, tcb.snd_max, tcb.rcv_nxt)

    def _uncount_orphan(self) -> None:
        if self._orphan_counted:
            self._orphan_counted = False
            self.layer.orphans -= 1

    # -- knobs, info -----------------------------------------------------

    @property
    def nodelay(self) -> bool:
        return self.config.nodelay

    @nodelay.setter
    def nodelay(self, value: bool) -> None:
        self.configure(nodelay=bool(value))

    @property
    def interactive(self) -> bool:
        """Ping-pong mode: ACKs are being delayed to ride on our replies (``delack.DelayedAck``)."""
        return self.receiver.delack.pingpong

    @property
    def reader_waiting(self) -> bool:
        """The application is blocked in a receive on this connection (set by the socket layer).

        The receiver then ACKs a PSH-ed segment at once (``delack.DelayedAck`` rule 4):
        the data is consumed at once, and Linux ACKs after such a read.
        """
        return self.receiver.delack.reader_waiting

    @reader_waiting.setter
    def reader_waiting(self, value: bool) -> None:
        self.receiver.delack.reader_waiting = bool(value)

    def configure(self, now: float | None = None, **knobs) -> None:
        """Change per-connection knobs (``TcpConfig`` names) on a live connection.

        The window scale was fixed by the handshake, so a larger ``rcvbuf``
        can only be advertised up to 65535 << rcv_wscale. ``quickack`` acts
        once, like Linux's TCP_QUICKACK: True enters quick-ACK mode (an owed
        ACK leaves at once), False enters ping-pong mode (ACKs are delayed).
        ``nodelay=True`` and ``cork=False`` send what may go now.
        """
        cfg = self.config = self.config.derive(**knobs)
        self.sender.configure(cfg)
        self.receiver.configure(cfg)
        if "quickack" in knobs and self.receiver.quickack(cfg.quickack):
            self._mark_dirty(now)
        if "congestion" in knobs:
            self.sender.set_congestion(cfg.congestion)
        if cfg.keepalive and self.tcb.state in (ESTABLISHED, CLOSE_WAIT):
            base = now if now is not None else self._last_rcv
            self._keepalive().arm(base + cfg.keepidle)
        elif not cfg.keepalive:
            self._keepalive_timer.cancel()
        if knobs.get("nodelay") or ("cork" in knobs and not cfg.cork):
            self._mark_dirty(now)

    def info(self) -> TcpInfo:
        return connection_info(self)
