"""The TCP layer: owns connections and listeners, demultiplexes segments, answers closed ports.

The stack hands each TCP segment to ``TcpLayer.input(src, dst, segment,
now)``, which parses the header (the checksum is checked here unless the
caller did; a bad one is the drop ``tcp.bad_checksum``, like every other
parse error by its reason) and calls ``segment_arrives(src, dst, seg,
payload, now)``; a caller that has parsed the header already (the fast
path's record, with the ``TcpHeader`` attribute names) calls that
directly. Demux is a dict lookup, most specific first: the exact 4-tuple,
then a listener on (dst, port), then a listener on (0.0.0.0, port). A
segment for no one gets a RST (RFC 9293 3.10.7.1) unless it is a RST
itself.

The stack also calls ``flush(now)`` once per poll round: it sends what user
calls (send, close, reads that open the window) left pending.

``TcpHost`` is what the layer needs from the stack: the timer heap, the
counters, a secret for ISNs and cookies, the output functions, and routing
facts (MTU, source address).

Connections and listeners use, besides ``host`` and ``config``:
``register``, ``forget``, ``forget_listener``, ``mark_dirty``,
``challenge_allowed``, ``send_segment``, ``send_reset``.

Drops (``stats.drop``): the parse errors (tcp.truncated, tcp.bad_data_offset,
tcp.bad_checksum, tcp.bad_options), tcp.bad_port, tcp.no_socket; per
connection tcp.unacceptable (those wholly left of RCV.NXT, a retransmission or a
segment a later one overtook, also counted as tcp.unacceptable_old), tcp.paws, tcp.no_timestamp, tcp.syn_in_window,
tcp.rst_not_exact, tcp.rst_out_of_window, tcp.rst_without_ack, tcp.no_ack,
tcp.no_syn, tcp.bad_ack, tcp.ack_unsent, tcp.ack_too_old,
tcp.accept_queue_full, tcp.ooo_overflow, tcp.data_after_fin,
tcp.data_after_close, tcp.icmp_no_connection, tcp.icmp_bad_seq; per listener tcp.listen_rst,
tcp.listen_bad_ack, tcp.listen_no_syn, tcp.listen_overflow,
tcp.syn_queue_full, tcp.syncookie_bad; in TIME-WAIT tcp.time_wait_unacceptable
(answered by an ACK at most every ``challenge_ack_interval``, else
tcp.invalid_ack_ratelimited). Counters (``stats.inc``) include
tcp.in_segs, tcp.out_segs, tcp.retrans_segs, tcp.rto_expired,
tcp.fast_retransmits, tcp.partial_acks, tcp.out_rsts, tcp.challenge_acks(_suppressed),
tcp.window_probes, tcp.keepalive_probes, tcp.syncookies_sent/accepted,
tcp.syncookie_not_expected (an ACK to a listener that sent no cookie within
``COOKIE_VALID``: not checked as one), tcp.time_wait_fin_acked,
tcp.active_opens, tcp.passive_opens, tcp.established, tcp.errors.<Exception>,
tcp.invalid_ack_ratelimited (an unacceptable segment or a PAWS drop within
``challenge_ack_interval`` of the last such ACK or challenge ACK: not answered),
tcp.flow_table_probe_limit (an insertion into the C flow table displaced 32
slots or more from its home: counted, and the table doubles while under 8x
its entries).

Limits against hostile peers (knobs of the layer's ``TcpConfig``; each
limit reached is counted):

- ``max_connections`` (65536): TCBs of every state, TIME-WAIT included;
  beyond it a SYN (or a cookie ACK) is the drop tcp.conn_limit and
  ``connect`` raises ENOBUFS (tcp.conn_limit_active).
- ``max_time_wait`` (32768, Linux's tcp_max_tw_buckets): TIME-WAIT records
  (``timewait.TimeWait``, which replace connections entering TIME-WAIT in
  ``connections``, outside the C flow table); beyond it the oldest ends
  (tcp.time_wait_overflow).
- ``orphan_retries`` (8, Linux's tcp_orphan_retries default): a connection
  the user closed that still has data or a FIN to deliver is reset and
  freed after that many retransmission or persist expiries in a row
  without SND.UNA moving; a probe answered with a zero window counts
  (tcp.orphan_retries_exceeded).
- ``max_orphans`` (4096, Linux's tcp_max_orphans): closing a connection
  beyond it resets it at once (tcp.orphans_over_limit); TIME-WAIT does not
  count.
- ``tcp_mem`` (64 MiB, like Linux's tcp_mem hard limit but in bytes): the
  bytes held in all send, receive and out-of-order buffers; data that
  would go beyond it is not received (the drop tcp.mem_pressure, an ACK
  tells the peer to send it again), windows stop opening, and ``send``
  takes only what fits (tcp.mem_pressure_send).
- ``tcp_mem_pressure`` (3/4 of ``tcp_mem``, Linux's tcp_mem pressure
  level): above it the layer is under memory pressure
  (tcp.mem_pressure_entered counts each time it enters) and every
  connection's buffers are trimmed to what they hold plus ``PRESSURE_MIN``
  (4 KiB, Linux's tcp_rmem[0] / tcp_wmem[0]): the receive window never
  reaches further than that (it stops growing; an advertised edge is never
  taken back, RFC 7323 2.4), out-of-order data is not queued (the drop
  tcp.mem_pressure_ooo, ACKed at once so SACK-less recovery goes on), and
  ``send`` takes only what brings the send buffer to ``PRESSURE_MIN``
  (tcp.mem_pressure_send). In-order data within the advertised window is
  still taken up to the hard level. Below the soft level again, windows
  open as before.
- ``challenge_ack_limit`` (1000 per second, each second's budget drawn in
  [limit/2, 3*limit/2), ``limits.py``).
- SYN cookies: checked only within ``COOKIE_VALID`` (128 s) after the
  listener sent one, with MAC keys that rotate (``syncookies.py``).
"""

from __future__ import annotations

import errno
from typing import Callable, Protocol

from ustack._fastpath import (CUBIC_FIELDS, DELACK_FIELDS, NEWRENO_FIELDS, RECEIVER_FIELDS, RTT_FIELDS, EstablishedPath,
                              FinPath, FlowTable, SlotLayout, TxPath)
from ustack.transport.ports import EphemeralPorts
from ustack.transport.tcp.config import TcpConfig
from ustack.transport.tcp.congestion import Cubic, NewReno
from ustack.transport.tcp.connection import Connection
from ustack.transport.tcp.delack import DelayedAck
from ustack.transport.tcp.isn import KeyedHash
from ustack.transport.tcp.limits import ChallengeAckBudget
from ustack.transport.tcp.listener import Listener
from ustack.transport.tcp.output import write_segment
from ustack.transport.tcp.rack import RackRecovery
from ustack.transport.tcp.receiver import Receiver
from ustack.transport.tcp.reuseport import ReuseportGroup
from ustack.transport.tcp.rtt import RttEstimator
from ustack.transport.tcp.seq import seq_add, seq_ge, seq_lt
from ustack.transport.tcp.syncookies import SynCookies
from ustack.transport.tcp.tcb import CLOSE_WAIT, RECEIVING, SYNCHRONIZED, TCB_LAYOUT
from ustack.transport.tcp.timewait import TimeWait
from ustack.wire import WireError
from ustack.wire.tcp import ACK, FIN, RST, SYN, TcpHeader

ANY = b"\0\0\0\0"
ANY6 = bytes(16)


class TcpHost(Protocol):
    """What the stack provides to the TCP layer."""

    timers: "ustack.timers.TimerHeap"  # noqa: F821  .timer(callback) -> Timer; callbacks get `now`
    stats: "ustack.stats.Stats"  # noqa: F821  .inc(name), .drop(reason)
    isn_secret: bytes  # 16+ random bytes chosen by the stack at start

    def tcp_output(self, src: bytes, dst: bytes, segment: bytes | bytearray, now: float) -> None:
        """Hand a full TCP segment (header + payload, checksum filled) to IP."""

    def tcp_output_segment(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
                           window: int, ts: tuple | None, payload, now: float) -> bool:
        """Write an established segment (no options but timestamps, ``ts`` = (TSval, TSecr) or None)
        straight into a TX slot and return True; or send nothing and return False (a host without a
        fast emitter always does), and the connection builds the segment and calls ``tcp_output``."""

    def tcp_output_options(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
                           window: int, options: bytes, now: float) -> bool:
        """Write a segment without data whose header carries ``options`` (our SYN or SYN-ACK) straight
        into a TX slot and return True; or send nothing and return False, and the connection builds
        the segment (``output.syn_segment``) and calls ``tcp_output``."""

    def tcp_push(self) -> None:
        """Post the frames written so far at once (one kick) instead of at the end of the poll round:
        a SYN-ACK is not held back by the rest of the round's burst."""

    def route_mtu(self, dst: bytes) -> int:
        """IP MTU toward ``dst`` (our MSS = MTU - 40, or - 60 over IPv6: ``wire.tcp.headers_len``)."""

    def pick_source(self, dst: bytes) -> bytes:
        """The local address to use toward ``dst``."""


class TcpLayer:
    """All TCP state of one stack."""

    __slots__ = ("host", "config", "connections", "listeners", "_dirty", "_resets", "challenge_acks", "ports",
                 "_keyed", "cookies", "orphans", "fastpath", "flows", "established", "tx", "_notify_due",
                 "mem_used", "under_pressure", "rx_hold", "time_wait", "in_round", "_ack_round", "copiers")

    def __init__(self, host: TcpHost, config: TcpConfig | None = None, fastpath: bool = True):
        self.host = host
        # Receive header prediction in C for established flows (Connection.segment_arrives); the
        # adapters that build stacks map USTACK_FASTPATH=0 onto False (ustack.api.environment).
        self.fastpath = fastpath
        self.config = config if config is not None else TcpConfig()
        self.config.validate()
        self.connections: dict[tuple, Connection] = {}
        # receive header prediction (Connection._fast), over the TCB, Receiver and DelayedAck slots
        self.established = EstablishedPath(TCB_LAYOUT, SlotLayout(Receiver, RECEIVER_FIELDS),
                                           SlotLayout(DelayedAck, DELACK_FIELDS))
        # the transmit side in C (Sender.tx): full-sized segments of new data from the send ring
        # and the congestion window's growth on pure ACKs (RttEstimator's and the algorithms' slots)
        self.tx = TxPath(TCB_LAYOUT, self.established.receiver_layout, self.established.delack_layout, RackRecovery,
                         SlotLayout(RttEstimator, RTT_FIELDS), SlotLayout(NewReno, NEWRENO_FIELDS),
                         SlotLayout(Cubic, CUBIC_FIELDS))
        # The same connections indexed in C, for the stack's fast demux of established flows (IPv4 and IPv6);
        # it hands predicted segments to ``established`` itself.
        self.flows = FlowTable(host.stats.counters, TCB_LAYOUT, self.established)
        # the peer's in-order FIN on an established flow (its common form): CLOSE-WAIT in C (_fp_fin.pxi)
        self.flows.fin = FinPath(self.established, CLOSE_WAIT)
        self.listeners: dict[tuple, Listener] = {}
        self._dirty: list = []
        self._notify_due: list = []  # connections whose on_event waits for the end of the round
        self._resets: list = []  # RSTs of time-less aborts, sent by the next flush
        # The stack is delivering a poll round's burst (Stack.poll): in-order ACKs wait for the round's
        # end (Receiver.ack_bulk), sent by flush for the connections in _ack_round.
        self.in_round = False
        self._ack_round: list = []
        self.ports = EphemeralPorts(host.isn_secret, b"tcp")
        self._keyed = KeyedHash(host.isn_secret)
        # RFC 5961 section 7: a layer-wide budget of challenge ACKs per second, randomized (CVE-2016-5696).
        self.challenge_acks = ChallengeAckBudget(self.config.challenge_ack_limit, host.isn_secret)
        self.cookies = SynCookies(host.isn_secret)  # RFC 4987 3.6 with rotating keys
        self.rx_hold = None  # the stack's RxHold: receive buffers keep views into RX frames (ustack.rxhold)
        self.mem_used = 0  # bytes held in every connection's send, receive and out-of-order buffers
        self.under_pressure = False  # mem_used is at or above the soft level (tcp_mem_pressure)
        self.orphans = 0  # connections closed by the user still delivering (kept by Connection)
        # TIME-WAIT records (also in ``connections``), oldest first: the bound drops from the front.
        self.time_wait: dict[tuple, TimeWait] = {}
        self.copiers = None  # prototype.Copiers, made with the first listener's prototype

    # -- what the stack calls --------------------------------------------

    def input(self, src: bytes, dst: bytes, segment, now: float, checksum_ok: bool = False) -> None:
        """One TCP segment from IPv4 (``src``/``dst`` 4-byte addresses, ``segment`` header + data).

        ``checksum_ok=True`` skips the checksum when the caller (the fast
        path's classify, or the device) has verified it already.
        """
        try:
            hdr = TcpHeader.parse(segment, src, dst, verify_checksum=not checksum_ok)
        except WireError as e:
            self.host.stats.drop(e.reason)
            return
        self.segment_arrives(src, dst, hdr, memoryview(segment)[hdr.header_len :], now)

    def segment_arrives(self, src: bytes, dst: bytes, seg, payload, now: float) -> None:
        """One parsed, checksum-verified segment: demux to a connection, a listener, or CLOSED.

        ``seg`` has the ``TcpHeader`` fields as attributes (``src_port``,
        ``dst_port``, ``seq``, ``ack``, ``flags``, ``window``, ``urgent``,
        ``header_len``, ``mss``, ``wscale``, ``sack_permitted``,
        ``sack_blocks``, ``timestamps``); ``payload`` is the data (a
        memoryview); ``src``/``dst`` are packed 4-byte addresses.
        """
        stats = self.host.stats
        sport = seg.src_port
        dport = seg.dst_port
        if sport == 0 or dport == 0:
            stats.drop("tcp.bad_port")
            return
        stats.inc("tcp.in_segs")
        src = bytes(src)
        dst = bytes(dst)
        conn = self.connections.get((dst, dport, src, sport))
        if conn is not None:
            if type(conn) is TimeWait and conn.reusable(seg) and self._listening(dst, dport):
                conn.close()  # a new incarnation: RFC 9293 3.10.7.4 / RFC 6191
            else:
                conn.segment_arrives(seg, payload, now)
                return
        listeners = self.listeners
        lst = listeners.get((dst, dport)) or listeners.get((ANY6 if len(dst) == 16 else ANY, dport))
        if lst is None and len(dst) == 4:
            lst = listeners.get((ANY6, dport))  # a dual-stack listener on :: hears IPv4 too (as Linux)
            if lst is not None and lst.v6only:
                lst = None
        if lst is not None:
            lst.segment_arrives(src, dst, seg, payload, now)
            return
        # CLOSED (RFC 9293 3.10.7.1).
        stats.drop("tcp.no_socket")
        flags = seg.flags
        if flags & RST:
            return
        if flags & ACK:
            self.send_reset(dst, src, dport, sport, seg.ack, None, now)
        else:
            seg_len = len(payload) + (1 if flags & SYN else 0) + (1 if flags & FIN else 0)
            self.send_reset(dst, src, dport, sport, 0, seq_add(seg.seq, seg_len), now)

    def icmp_error(self, laddr, lport: int, raddr, rport: int, itype: int, code: int, extra: int = 0,
                   now: float | None = None, quoted_seq: int | None = None) -> None:
        """An ICMP error quoting one of our segments (RFC 1122 4.2.3.9, RFC 5927, RFC 1191).

        Addresses are 4-byte strings or integers. ``extra`` is the next-hop
        MTU for "fragmentation needed" (type 3 code 4). Without ``now`` the
        resend after an MTU drop waits for the retransmission timer. When the
        caller passes the quoted segment's sequence number, errors quoting
        anything outside SND.UNA..SND.MAX are ignored (RFC 5927 4.1).
        """
        key = (_addr(laddr), lport, _addr(raddr), rport)
        conn = self.connections.get(key)
        if conn is None:
            self.host.stats.drop("tcp.icmp_no_connection")
            return
        if quoted_seq is not None and not self._quote_in_flight(conn, quoted_seq):
            return
        conn.icmp_error(itype, code, extra, now)

    def receiving(self, laddr: bytes, lport: int, raddr: bytes, rport: int) -> bool:
        """Whether one of our connections has the 4-tuple and takes data (ESTABLISHED, FIN-WAIT-1, FIN-WAIT-2)."""
        conn = self.connections.get((laddr, lport, raddr, rport))
        return type(conn) is Connection and conn.tcb.state in RECEIVING

    def icmp_quote_check(self, laddr, lport: int, raddr, rport: int, quoted_seq: int):
        """Before an ICMP error acts on state beyond the connection (a Packet Too Big on the path MTU, RFC
        8201 4 and RFC 5927 4.1): None when no connection has the 4-tuple, True when one has it and the
        quoted sequence number lies in SND.UNA..SND.MAX, False (the drop tcp.icmp_bad_seq) otherwise."""
        conn = self.connections.get((_addr(laddr), lport, _addr(raddr), rport))
        if conn is None:
            return None
        return self._quote_in_flight(conn, quoted_seq)

    def _quote_in_flight(self, conn, quoted_seq: int) -> bool:
        """RFC 5927 4.1: an error quoting a segment outside SND.UNA..SND.MAX is a blind forgery (counted)."""
        if type(conn) is TimeWait:  # nothing in flight: SND.UNA == SND.MAX
            self.host.stats.drop("tcp.icmp_bad_seq")
            return False
        tcb = conn.tcb
        if not (seq_ge(quoted_seq, tcb.snd_una) and seq_lt(quoted_seq, tcb.snd_max)):
            self.host.stats.drop("tcp.icmp_bad_seq")
            return False
        return True

    def flush(self, now: float) -> None:
        """Tell the application of the round's fast-path bursts, then send what user calls left
        pending. Call once per poll round."""
        due = self._notify_due
        if due:
            self._notify_due = []
            for conn in due:
                conn.notify_due()
        resets = self._resets
        while resets:
            src, dst, sport, dport, seq, ack = resets.pop(0)
            self.send_reset(src, dst, sport, dport, seq, ack, now)
        dirty = self._dirty
        while dirty:
            batch = dirty[:]
            dirty.clear()
            for conn in batch:
                conn.flush(now)
        acks = self._ack_round
        if acks:
            # The round's coalesced in-order ACKs, after the application read (the window it opened).
            self._ack_round = []
            for conn in acks:
                rcv = conn.receiver
                if conn.tcb.state in SYNCHRONIZED:
                    if rcv.ack_round:
                        if conn._fast is not None:
                            self.established.send_ack(conn, now)  # the same ACK, built in C
                        else:
                            conn.out.send_ack(now)
                    if rcv.gap_round:  # a gap filled in the round: its ACK once more (Receiver.ack_gap)
                        conn.out.send_ack(now)
                        self.host.stats.inc("tcp.gap_ack_repeats")
                rcv.gap_round = False

    def connect(self, local: tuple | None, remote: tuple, now: float, **opts) -> Connection:
        """Active open toward ``remote`` = (addr, port); ``local`` = (addr, port), either may be 0/None."""
        raddr, rport = bytes(remote[0]), int(remote[1])
        if not 0 < rport < 65536:
            raise OSError(errno.EINVAL, f"bad remote port {rport}")
        laddr, lport = (bytes(local[0]), int(local[1])) if local is not None else (ANY, 0)
        if laddr == ANY or laddr == ANY6:
            laddr = bytes(self.host.pick_source(raddr))
        if lport == 0:
            lport = self.pick_port(laddr, raddr, rport)
        elif (laddr, lport, raddr, rport) in self.connections:
            raise OSError(errno.EADDRINUSE, "Address already in use")
        if self.at_connection_limit():
            self.host.stats.inc("tcp.conn_limit_active")
            raise OSError(errno.ENOBUFS, f"too many TCP connections (max_connections {self.config.max_connections})")
        # Without knobs the connection shares the layer's defaults: configure() copies before it changes one.
        cfg = self.config.derive(**opts) if opts else self.config
        conn = Connection(self, cfg, (laddr, lport), (raddr, rport))
        self.register(conn)
        conn.open_active(now)
        return conn

    def listen(self, local: tuple, backlog: int, reuseport: bool = False, **opts) -> Listener:
        """Passive open on ``local`` = (addr, port); addr 0.0.0.0 listens on every address, port 0 picks one.

        ``reuseport``: join (or start) the SO_REUSEPORT group on ``local``
        (ustack.transport.tcp.reuseport); without it an existing listener
        there is EADDRINUSE.
        """
        laddr, lport = bytes(local[0]), int(local[1])
        if lport == 0:
            lport = self.pick_port(laddr, ANY, 0)
        key = (laddr, lport)
        existing = self.listeners.get(key)
        if existing is not None and not (reuseport and isinstance(existing, ReuseportGroup)):
            raise OSError(errno.EADDRINUSE, "Address already in use")
        lst = Listener(self, key, backlog, self.config.derive(**opts))
        if reuseport:
            group = existing if existing is not None else ReuseportGroup(self, key)
            group.members.append(lst)
            self.listeners[key] = group
        else:
            self.listeners[key] = lst
        return lst

    @property
    def keyed(self) -> KeyedHash:
        """F() of RFC 6528 keyed with the host's secret (ISNs, timestamp offsets, SYN cookies)."""
        keyed = self._keyed
        if keyed.secret is not self.host.isn_secret:  # the host's secret was replaced (tests do)
            keyed = self._keyed = KeyedHash(self.host.isn_secret)
        return keyed

    def pick_port(self, laddr: bytes, raddr: bytes, rport: int) -> int:
        """An ephemeral port (RFC 6056, ``ustack.transport.ports``) free for this destination."""
        listeners = self.listeners
        conns = self.connections

        def taken(port: int) -> bool:
            if (laddr, port) in listeners or (ANY, port) in listeners or (ANY6, port) in listeners:
                return True
            if raddr != ANY and raddr != ANY6:
                return (laddr, port, raddr, rport) in conns
            return any(k[0] == laddr and k[1] == port for k in conns)

        if raddr == ANY or raddr == ANY6:  # bind(port 0) before listen or connect: no destination yet
            return self.ports.pick_unconnected(laddr, taken)
        return self.ports.pick(laddr, raddr, rport, taken)

    # -- used by connections and listeners -------------------------------

    def mem_room(self) -> int:
        """Bytes the memory budget (``tcp_mem``) can still take."""
        return self.config.tcp_mem - self.mem_used

    def pressure_level(self) -> int:
        """The soft level of the memory budget (``tcp_mem_pressure``, by default 3/4 of ``tcp_mem``)."""
        cfg = self.config
        return cfg.tcp_mem_pressure if cfg.tcp_mem_pressure is not None else cfg.tcp_mem * 3 // 4

    def charge(self, delta: int) -> None:
        """Buffers grew (or shrank) by ``delta`` bytes: account them, and enter or leave memory pressure."""
        self.mem_used = used = self.mem_used + delta
        pressure = used >= self.pressure_level()
        if pressure != self.under_pressure:
            self.under_pressure = pressure
            if pressure:
                self.host.stats.inc("tcp.mem_pressure_entered")

    def at_connection_limit(self) -> bool:
        """The layer holds ``max_connections`` TCBs (every state, TIME-WAIT included)."""
        return len(self.connections) >= self.config.max_connections

    def register(self, conn: Connection) -> None:
        """Demux segments for ``conn.key`` to ``conn`` from now on."""
        self.connections[conn.key] = conn
        self.flows.add(*conn.key, conn)

    def forget(self, conn: Connection) -> None:
        """``conn`` is CLOSED: its TCB is deleted (its TIME-WAIT record too, when the user aborts it)."""
        entry = self.connections.get(conn.key)
        if entry is conn:
            del self.connections[conn.key]
            self.flows.remove(*conn.key, conn)
        elif type(entry) is TimeWait and entry.owner() is conn:
            entry.close()
        conn.receiver.rcvbuf.copy_out()  # bytes still to read stay, their RX frames go back

    def forward_progress(self, through: Callable[[bytes], bool]) -> dict:
        """SND.UNA of each connection whose remote address ``through(addr)`` accepts: the mark of
        forward progress the neighbour cache compares to confirm a next hop (RFC 4861 7.3.1: an ACK
        of new data shows our packets reach it). TIME-WAIT records send nothing and are left out."""
        marks = {}
        for key, conn in self.connections.items():
            if type(conn) is Connection and through(key[2]):
                marks[key] = conn.tcb.snd_una
        return marks

    def enter_time_wait(self, conn: Connection, window: int, now: float) -> None:
        """``conn`` entered TIME-WAIT: a light record (``timewait.TimeWait``) takes its place, out of the
        C flow table; beyond ``max_time_wait`` records the oldest ends (Linux's tcp_max_tw_buckets)."""
        key = conn.key
        if self.connections.get(key) is not conn:
            return
        self.flows.remove(*key, conn)
        conn.receiver.rcvbuf.copy_out()  # bytes the user may still read stay, their RX frames go back
        rec = TimeWait(self, conn, window, now)
        self.connections[key] = rec
        time_wait = self.time_wait
        time_wait[key] = rec
        limit = self.config.max_time_wait
        while len(time_wait) > limit:
            self.host.stats.inc("tcp.time_wait_overflow")
            next(iter(time_wait.values())).close()

    def forget_time_wait(self, rec: TimeWait) -> None:
        """``rec`` ended (2 MSL, a RST, a new incarnation, overflow)."""
        key = rec.key
        if self.connections.get(key) is rec:
            del self.connections[key]
        if self.time_wait.get(key) is rec:
            del self.time_wait[key]

    def forget_listener(self, lst: Listener) -> None:
        """``lst`` closed."""
        entry = self.listeners.get(lst.key)
        if entry is lst:
            del self.listeners[lst.key]
        elif isinstance(entry, ReuseportGroup) and lst in entry.members:
            entry.members.remove(lst)
            if not entry.members:
                del self.listeners[lst.key]

    def notify_later(self, conn: Connection) -> None:
        """``conn`` took a segment on the fast path: its ``on_event`` runs at the next ``flush``."""
        self._notify_due.append(conn)

    def ack_at_round_end(self, conn: Connection) -> None:
        """``conn`` owes an ACK at the end of this poll round (coalesced in-order data, compressed SACKs): ``flush``."""
        self._ack_round.append(conn)

    def mark_dirty(self, conn: Connection) -> None:
        """``conn`` has something to send at the next ``flush``."""
        self._dirty.append(conn)

    def challenge_allowed(self, now: float) -> bool:
        """RFC 5961 section 7: one more challenge ACK fits the layer-wide budget."""
        return self.challenge_acks.take(now)

    def send_segment(self, src: bytes, dst: bytes, hdr: TcpHeader, now: float, payload=b"") -> None:
        """A segment that belongs to no connection (SYN cookie SYN-ACK, RST)."""
        write_segment(self.host, src, dst, hdr, now, payload)
        self.host.stats.inc("tcp.out_segs")

    def send_reset(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int | None,
                   now: float) -> None:
        """<SEQ=seq><CTL=RST>, or <SEQ=seq><ACK=ack><CTL=RST,ACK> when ``ack`` is given."""
        if ack is None:
            hdr = TcpHeader(sport, dport, seq, 0, RST, 0)
        else:
            hdr = TcpHeader(sport, dport, seq, ack, RST | ACK, 0)
        self.send_segment(src, dst, hdr, now)
        self.host.stats.inc("tcp.out_rsts")

    def defer_reset(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int | None) -> None:
        """A reset for the next ``flush(now)`` (an abort called without the time)."""
        self._resets.append((src, dst, sport, dport, seq, ack))

    def _listening(self, addr: bytes, port: int) -> bool:
        """A listener would take a SYN to (addr, port) (a TIME-WAIT record may give way to it)."""
        listeners = self.listeners
        return (addr, port) in listeners or (ANY, port) in listeners or (ANY6, port) in listeners


def _addr(a) -> bytes:
    return a.to_bytes(4, "big") if isinstance(a, int) else bytes(a)
