"""A listening endpoint: SYN queue, accept queue, SYN cookies (RFC 9293 3.10.7.2, RFC 4987).

A SYN creates a ``synrecv.SynReceived`` record (the layer demuxes its
later segments by 4-tuple to it; the ``Connection`` in SYN-RECEIVED is
built from it when the next segment or its timer needs it); it counts against the SYN queue until the
handshake completes, then moves to the accept queue, bounded by the
backlog. When the accept queue is full, new SYNs are dropped and a
completing ACK is dropped (the peer retransmits; the SYN-ACK timer gives
up eventually). When the SYN queue is full, the listener answers with a
SYN cookie (RFC 4987 3.6) and keeps no state: the ISS encodes a time
counter, an MSS index and a keyed MAC; if the peer sent timestamps, the
low 6 bits of our TSval carry its window scale (4 bits, 15 = none) and
SACK-permitted (1 bit), as Linux does, so those options survive. A
returning ACK whose SEG.ACK - 1 is a valid cookie rebuilds the connection
in ESTABLISHED; any other ACK is answered with a RST. ACKs are checked as
cookies only within ``COOKIE_VALID`` after this listener last sent one, and
the MAC keys rotate every period (``syncookies.py``).

Used by the layer: ``segment_arrives``; by its connections: ``has_room``,
``child_established``, ``child_gone``.
"""

from __future__ import annotations

from collections import deque

from ustack.transport.tcp.connection import Connection, window_shift_for
from ustack.transport.tcp.isn import COOKIE_MSS, cookie_mss_index
from ustack.transport.tcp.rtt import ts_clock
from ustack.transport.tcp.seq import seq_add
from ustack.transport.tcp.synrecv import SynReceived
from ustack.transport.tcp.syncookies import COOKIE_VALID
from ustack.transport.tcp.tcb import State
from ustack.wire.tcp import ACK, RST, SYN, TcpHeader, headers_len

_WS_NONE = 0xF


class Listener:
    __slots__ = ("layer", "local", "key", "backlog", "config", "_accept", "_syn_queue", "closed", "on_event",
                 "cookies_sent", "cookies_accepted", "cookies_rejected", "overflows", "last_cookie_sent", "v6only",
                 "prototype")

    def __init__(self, layer, local: tuple, backlog: int, config):
        self.layer = layer
        self.local = (bytes(local[0]), local[1])
        self.key = self.local
        self.backlog = max(1, backlog)
        self.config = config
        self._accept: deque = deque()
        self._syn_queue: set = set()
        self.closed = False
        self.on_event = None
        self.cookies_sent = self.cookies_accepted = self.cookies_rejected = self.overflows = 0
        self.last_cookie_sent = float("-inf")
        self.v6only = False  # on ::, hear IPv6 only (IPV6_V6ONLY); else IPv4 too, as Linux's default
        self.prototype = None  # what its new connections are copied from (prototype.Prototype), made with the first

    def __repr__(self) -> str:
        return f"<Listener {'.'.join(map(str, self.local[0]))}:{self.local[1]} backlog={self.backlog}>"

    @property
    def syn_backlog(self) -> int:
        return self.config.syn_backlog or self.backlog

    @property
    def readable(self) -> bool:
        return bool(self._accept) or self.closed

    @property
    def pending(self) -> int:
        """Connections waiting in the accept queue."""
        return len(self._accept)

    @property
    def half_open(self) -> int:
        """Connections in SYN-RECEIVED (the SYN queue)."""
        return len(self._syn_queue)

    def accept(self):
        """The next established connection, or None."""
        if not self._accept:
            return None
        conn = self._accept.popleft()
        conn.detach_listener()
        return conn

    def close(self, now: float | None = None) -> None:
        """Stop listening; connections not yet accepted are reset (at ``now``, or at the next flush)."""
        if self.closed:
            return
        self.closed = True
        self.layer.forget_listener(self)
        for conn in list(self._syn_queue) + list(self._accept):
            conn.detach_listener()
            conn.abort(now)
        self._syn_queue.clear()
        self._accept.clear()
        self._notify()

    # -- called by connections -------------------------------------------

    def has_room(self) -> bool:
        """The accept queue can take one more connection."""
        return len(self._accept) < self.backlog

    def child_established(self, conn) -> None:
        """A connection of the SYN queue completed its handshake: it waits for accept()."""
        self._syn_queue.discard(conn)
        self._accept.append(conn)
        self._notify()

    def child_gone(self, conn) -> None:
        """A connection of this listener was deleted (reset, timed out)."""
        self._syn_queue.discard(conn)
        # A reset connection in the accept queue stays there: accept() returns it and recv() raises.

    def _notify(self) -> None:
        if self.on_event is not None:
            self.on_event(self)

    # -- LISTEN state (RFC 9293 3.10.7.2) --------------------------------

    def segment_arrives(self, src: bytes, dst: bytes, hdr, payload, now: float) -> None:
        """A segment for no connection, to this listener's address (``hdr``: header fields as attributes)."""
        stats = self.layer.host.stats
        flags = hdr.flags
        if flags & RST:
            stats.drop("tcp.listen_rst")
            return
        if flags & ACK:
            if not flags & SYN and self.config.syncookies:
                if now - self.last_cookie_sent <= COOKIE_VALID:
                    if self._cookie_ack(src, dst, hdr, payload, now):
                        return
                else:
                    stats.inc("tcp.syncookie_not_expected")  # no cookie sent lately: not even checked
            stats.drop("tcp.listen_bad_ack")
            self.layer.send_reset(dst, src, hdr.dst_port, hdr.src_port, hdr.ack, None, now)
            return
        if not flags & SYN:
            stats.drop("tcp.listen_no_syn")
            return
        if not self.has_room():
            self.overflows += 1
            stats.drop("tcp.listen_overflow")
            return
        if self.layer.at_connection_limit():
            stats.drop("tcp.conn_limit")  # the layer-wide cap on TCBs
            return
        if len(self._syn_queue) >= self.syn_backlog:
            if not self.config.syncookies:
                stats.drop("tcp.syn_queue_full")
                return
            self._send_cookie(src, dst, hdr, now)
            return
        # Data on the SYN is not kept: it is not acknowledged, so the peer sends it again.
        # A light record until the next segment (synrecv.py); the SYN-ACK leaves now.
        rec = SynReceived(self.layer, self.config, self, (dst, hdr.dst_port), (src, hdr.src_port), hdr, now)
        self.layer.connections[rec.key] = rec  # outside the C flow table until built
        self._syn_queue.add(rec)
        rec.send_syn_ack(now)
        # The SYN-ACK leaves now, not after the rest of the round's burst: the peer's connect()
        # waits for it (another flow's ACK or FIN behind it in the burst would add its cost).
        self.layer.host.tcp_push()

    # -- SYN cookies -------------------------------------------------------

    def _send_cookie(self, src: bytes, dst: bytes, hdr, now: float) -> None:
        layer = self.layer
        cfg = self.config
        own_mss = layer.host.route_mtu(src) - headers_len(src)
        if cfg.mss:
            own_mss = min(own_mss, cfg.mss)
        peer_mss = min(hdr.mss or 536, own_mss)
        idx = cookie_mss_index(peer_mss)
        iss = layer.cookies.make(dst, hdr.dst_port, src, hdr.src_port, hdr.seq, idx, now)
        ts = wscale = None
        sack_perm = False
        if cfg.timestamps and hdr.timestamps is not None:
            # Options survive only through the timestamp: encode them in TSval's low bits.
            peer_ws = hdr.wscale if (cfg.window_scaling and hdr.wscale is not None) else _WS_NONE
            bits = (min(peer_ws, 14) if peer_ws != _WS_NONE else _WS_NONE) | (0x10 if cfg.sack and hdr.sack_permitted else 0)
            ts_now = ts_clock(now, layer.keyed.ts_offset(dst, hdr.dst_port, src, hdr.src_port))
            tsval = (ts_now & ~0x3F) | bits
            if tsval > ts_now:
                tsval -= 64  # never ahead of the connection's clock (the peer's PAWS would object)
            ts = (tsval & 0xFFFFFFFF, hdr.timestamps[0])
            if peer_ws != _WS_NONE:
                wscale = window_shift_for(cfg.rcvbuf_ceiling)
            sack_perm = bool(bits & 0x10)
        reply = TcpHeader(hdr.dst_port, hdr.src_port, iss, seq_add(hdr.seq, 1), SYN | ACK,
                          min(cfg.rcvbuf, 0xFFFF), 0, 0, mss=own_mss,
                          wscale=wscale, sack_permitted=sack_perm, timestamps=ts)
        layer.send_segment(dst, src, reply, now)
        self.cookies_sent += 1
        self.last_cookie_sent = now
        layer.host.stats.inc("tcp.syncookies_sent")

    def _cookie_ack(self, src: bytes, dst: bytes, hdr, payload, now: float) -> bool:
        """A returning ACK: rebuild the connection if SEG.ACK - 1 is our cookie."""
        layer = self.layer
        stats = layer.host.stats
        cookie = seq_add(hdr.ack, -1)
        idx = layer.cookies.check(dst, hdr.dst_port, src, hdr.src_port, seq_add(hdr.seq, -1), cookie, now)
        if idx is None:
            self.cookies_rejected += 1
            stats.drop("tcp.syncookie_bad")
            return False
        if not self.has_room():
            self.overflows += 1
            stats.drop("tcp.listen_overflow")
            return True  # valid but no room: drop quietly, the peer retransmits
        if layer.at_connection_limit():
            stats.drop("tcp.conn_limit")
            return True
        peer_ws = None
        sack_ok = False
        ts = hdr.timestamps
        if ts is not None and self.config.timestamps:
            bits = ts[1] & 0x3F
            if bits & 0xF != _WS_NONE:
                peer_ws = bits & 0xF
            sack_ok = bool(bits & 0x10)
        conn = Connection(layer, self.config, (dst, hdr.dst_port), (src, hdr.src_port), listener=self)
        layer.register(conn)
        self.cookies_accepted += 1
        stats.inc("tcp.syncookies_accepted")
        conn.open_from_cookie(hdr, COOKIE_MSS[idx], peer_ws, sack_ok, now)
        if conn.tcb.state != State.CLOSED and (payload or hdr.flags & ~ACK):
            conn.segment_arrives(hdr, payload, now)  # data (or FIN) riding on the cookie ACK
        return True
