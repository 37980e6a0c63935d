"""IPv6 (RFC 8200): the second ``IpLayer``; output, fragments, reassembly, path MTU, extension headers.

Output: ``output(src, dst, proto, payload, now)`` routes through
``route6.Interface6`` (on-link or a default router), resolves the next hop
through Neighbor Discovery (multicast destinations map to 33:33:xx MACs,
RFC 2464 7) and writes Ethernet + IPv6 header + payload into a TX slot from
a per-flow template. Every packet carries a flow label (RFC 6437): a keyed
hash of addresses, protocol and ports, stable for a flow, unpredictable
from outside. A payload larger than the path MTU is fragmented at the
source (RFC 8200 4.5: a Fragment header with an unpredictable 32-bit
identification, RFC 7739; data in multiples of 8) unless ``df``, which
raises EMSGSIZE. The path MTU per destination (RFC 8201) comes from Packet
Too Big (``pmtu_update``), never below 1280, and is forgotten after
``pmtu_timeout`` seconds (10 minutes, RFC 8201 5.3); the table holds at
most ``max_pmtu_entries`` (the oldest goes first). The fast emits
(``emit_udp``/``emit_tcp``) write established flows' datagrams and
segments from the same templates in one C call (``_fp_emit6.pxi``).

Input: UDP, TCP and ICMPv6 right after the fixed header are parsed by the
fast path's classify (K_UDP6/K_TCP6/K_ICMP6) and go straight to the
transports. Everything else (K_IP6) comes to ``input_ext``: the extension
header chain is walked with a limit (``ustack.wire.ipv6.walk``:
hop-by-hop only first, options by their action bits, routing headers with
segments left refused (RFC 5095), at most ``max_extension_headers``), a
failure answered with Parameter Problem where RFC 4443 allows; fragments
are reassembled (``ustack.net.reassembly`` keyed by source, destination
and identification; overlaps discard the datagram, RFC 5722; atomic
fragments are processed at once, RFC 6946; a first fragment without the
whole header chain is dropped, RFC 7112; timeout 60 s with Time Exceeded
code 1 when fragment zero arrived); then the upper-layer message is run
through classify again as a frame without extension headers
(``redeliver``), so L4 validation has one home.

Martian sources (RFC 4291 2.5.2, 2.5.5.2, 2.7): multicast, loopback,
IPv4-mapped, the unspecified address except for ICMPv6 (DAD and router
solicitation use it), and our own address on UDP/TCP, are dropped as
``ipv6.martian_source.<kind>``.
"""

from __future__ import annotations

import errno
import hashlib
import struct
from typing import Callable, Optional

from ustack import _fastpath
from ustack.net.addr import ANY6
from ustack.net.fragment import fragment, piece_size
from ustack.net.link import Link
from ustack.net.ndp import DELAY, PROBE, REACHABLE, NdpLayer
from ustack.net.reassembly import Reassembler
from ustack.net.route6 import Interface6, multicast_mac
from ustack.stats import Stats
from ustack.timers import TimerHeap
from ustack.wire import WireError
from ustack.wire.icmpv6 import Icmpv6Message
from ustack.wire.ipv6 import (
    HEADER_LEN,
    MAX_EXTENSION_HEADERS,
    MIN_MTU,
    NH_FRAGMENT,
    NH_NO_NEXT,
    PP_ERRONEOUS_FIELD,
    PP_INCOMPLETE_CHAIN,
    PP_UNRECOGNIZED_NEXT_HEADER,
    ParameterProblem,
    walk,
)
from ustack.wire.proto import PROTO_ICMPV6, PROTO_TCP, PROTO_UDP

DEFAULT_HOP_LIMIT = 64
ETHERTYPE_IPV6 = 0x86DD
_TEMPLATE = struct.Struct("!6s6sHIHBB16s16s")
_FRAG = struct.Struct("!BBHI")
_PORTS = struct.Struct("!HH")
MAX_TEMPLATES = 4096
UPPER_LAYERS = frozenset((PROTO_TCP, PROTO_UDP, PROTO_ICMPV6))
V4_MAPPED = bytes(10) + b"\xff\xff"
LOOPBACK6 = bytes(15) + b"\x01"


class Ipv6Layer:
    """IPv6 on one interface: implements ``ustack.net.ip.IpLayer``."""

    version = 6
    header_len = HEADER_LEN

    def __init__(self, link: Link, iface: Interface6, timers: TimerHeap, stats: Stats, *, secret: bytes,
                 stable_secret: Optional[bytes] = None, hop_limit: int = DEFAULT_HOP_LIMIT,
                 reassembly_timeout: float = 60.0, reassembly_max_bytes: int = 4 << 20,
                 reassembly_max_datagrams: int = 64, max_extension_headers: int = MAX_EXTENSION_HEADERS,
                 pmtu_timeout: float = 600.0, max_pmtu_entries: int = 1024, ndp: Optional[dict] = None):
        self._l2 = bytes(12)  # Ethernet addresses of the frame input_ext is working on
        self.loopback = False  # set by the Stack on a loopback interface: ::1 and our own sources accepted
        if iface.mtu < MIN_MTU:
            raise ValueError(f"IPv6 needs a link MTU of at least {MIN_MTU} (RFC 8200 section 5), not {iface.mtu}")
        self.link = link
        self.iface = iface
        self.timers = timers
        self.stats = stats
        self.hop_limit = hop_limit
        self.max_extension_headers = max_extension_headers
        self.pmtu_timeout = pmtu_timeout
        self.max_pmtu_entries = max_pmtu_entries
        self._secret = bytes(secret[:32])
        self._label_hash = hashlib.blake2s(key=self._secret, digest_size=4)  # keyed once, copied per flow
        self.ndp = NdpLayer(iface, timers, stats, self.send_ndp, stable_secret=stable_secret or secret, **(ndp or {}))
        self.reassembler = Reassembler(timers, stats, timeout=reassembly_timeout, max_bytes=reassembly_max_bytes,
                                       max_datagrams=reassembly_max_datagrams, on_timeout=self._reassembly_timeout,
                                       prefix="ipv6", max_payload=65535)
        self.pmtu: dict[bytes, tuple[int, float]] = {}  # destination -> (path MTU, expiry)
        self._pmtu_timer = timers.timer(self._pmtu_expire)
        self._templates: dict[tuple, bytes] = {}
        self._frag_counter = 0
        # What validates the per-flow frame templates (``tcp_template``): the interface's, bumped by NDP on a
        # neighbour change and here on a path MTU change or ``invalidate``.
        self.gen = iface.gen
        # Set by the Stack: the demux for a rebuilt datagram, who sends ICMPv6 errors.
        self.redeliver: Optional[Callable[[memoryview, object, float], None]] = None
        self.send_error: Optional[Callable[..., bool]] = None

    # -- routing (IpLayer) -------------------------------------------------------
    def source(self, dst: bytes) -> bytes:
        self.iface.next_hop(dst, 0.0)  # ENETUNREACH without a route (lifetimes are checked on output)
        return self.iface.source(dst)

    def mtu(self, dst: bytes) -> int:
        entry = self.pmtu.get(dst)
        if entry is not None:
            return min(entry[0], self.iface.mtu)
        return self.iface.mtu

    def pmtu_update(self, dst: bytes, mtu: int, now: float, flush: bool = True) -> bool:
        """Packet Too Big for ``dst`` (RFC 8201 4): lower its path MTU, never below 1280. True if it fell.
        ``flush`` rebuilds every cached frame template (they copy the MTU); without it the entry alone
        changes (a quote no connection vouched for: templates already built keep their MTU, the next ones
        and every Python-path send take the new one)."""
        mtu = max(mtu, MIN_MTU)
        if mtu >= self.mtu(dst):
            return False
        table = self.pmtu
        if dst not in table and len(table) >= self.max_pmtu_entries:
            del table[next(iter(table))]
            self.stats.inc("ipv6.pmtu_evicted")
        table.pop(dst, None)
        table[dst] = (mtu, now + self.pmtu_timeout)
        if flush:
            self.gen.bump()
        if self._pmtu_timer.deadline is None:
            self._pmtu_timer.arm(now + self.pmtu_timeout)
        self.stats.inc("ipv6.pmtu_reductions")
        return True

    def _pmtu_expire(self, now: float) -> None:
        table = self.pmtu
        while table:
            dst = next(iter(table))
            if table[dst][1] > now:
                self._pmtu_timer.arm(table[dst][1])
                return
            del table[dst]  # RFC 8201 5.3: try the larger MTU again

    # -- output ------------------------------------------------------------------------
    def flow_label(self, src: bytes, dst: bytes, proto: int, ports: bytes) -> int:
        """RFC 6437 3: a keyed hash of the flow's 5-tuple, 20 bits, never zero."""
        h = self._label_hash.copy()
        h.update(src + dst + bytes((proto,)) + ports)
        return (int.from_bytes(h.digest(), "big") & 0xFFFFF) or 1

    def _template(self, mac: bytes, src: bytes, dst: bytes, proto: int, hlim: int, tc: int, ports: bytes) -> bytes:
        key = (mac, src, dst, proto, hlim, tc, ports)
        t = self._templates.get(key)
        if t is None:
            if len(self._templates) >= MAX_TEMPLATES:
                self._templates.clear()
            word = (6 << 28) | ((tc & 0xFF) << 20) | self.flow_label(src, dst, proto, ports)
            t = _TEMPLATE.pack(mac, self.link.mac, ETHERTYPE_IPV6, word, 0, proto, hlim, src, dst)
            self._templates[key] = t
        return t

    def output(self, src: bytes, dst: bytes, proto: int, payload, now: float, *, ttl: Optional[int] = None,
               tos: int = 0, df: bool = False) -> None:
        """Send one IPv6 packet carrying ``payload`` (an upper-layer message, checksum done)."""
        if ttl is None:
            ttl = self.ndp.cur_hop_limit or self.hop_limit
        n = len(payload)
        if n > 65535:
            raise OSError(errno.EMSGSIZE, "Message too long for IPv6 (no jumbograms)")
        mtu = self.mtu(dst)
        if df and n + HEADER_LEN > mtu:
            raise OSError(errno.EMSGSIZE, "Message too long (larger than the path MTU)")
        if dst[0] == 0xFF:
            self._emit(multicast_mac(dst), src, dst, proto, ttl, tos, payload, mtu)
            return
        hop = self.iface.next_hop(dst, now)
        mac = self.ndp.lookup(hop, now)
        if mac is not None:
            self._emit(mac, src, dst, proto, ttl, tos, payload, mtu)
            return
        data = bytes(payload)  # outlives the caller's buffer while NDP resolves
        self.ndp.resolve_then(hop, lambda m: self._emit(m, src, dst, proto, ttl, tos, data, self.mtu(dst)), now)

    def _emit(self, mac: bytes, src: bytes, dst: bytes, proto: int, hlim: int, tc: int, payload, mtu: int) -> None:
        link = self.link
        n = len(payload)
        ports = bytes(payload[0:4]) if proto in (PROTO_TCP, PROTO_UDP) and n >= 4 else b""
        tmpl = self._template(mac, src, dst, proto, hlim, tc, ports)
        if n + HEADER_LEN <= mtu:
            slot = link.slot()
            if slot is None:
                return
            link.sent(_fastpath.emit_ipv6(slot, tmpl, payload))
            self.stats.inc("ipv6.packets_sent")
            return
        # RFC 8200 4.5: the fragmentable part in pieces of a multiple of 8 bytes, each behind a Fragment header
        # with an unpredictable identification (RFC 7739).
        self._frag_counter += 1
        ident = int.from_bytes(hashlib.blake2s(dst + self._frag_counter.to_bytes(8, "big"), key=self._secret,
                                               digest_size=4).digest(), "big")

        def emit_piece(slot, off: int, piece, more: bool) -> int:
            size = len(piece)
            slot[0:54] = tmpl
            slot[18:20] = (8 + size).to_bytes(2, "big")
            slot[20] = NH_FRAGMENT
            _FRAG.pack_into(slot, 54, proto, 0, off | int(more), ident)
            slot[62:62 + size] = piece
            return 62 + size

        if fragment(link, payload, piece_size(mtu, HEADER_LEN + 8), emit_piece, self.stats, "ipv6.fragments_sent"):
            self.stats.inc("ipv6.packets_sent")

    def send_mld(self, src: bytes, dst: bytes, packet: bytes) -> None:
        """An MLD report to the multicast ``dst``: ``packet`` starts with its Hop-by-Hop (Router Alert)
        header; hop limit 1 (RFC 3810 5.2.15)."""
        self._emit(multicast_mac(dst), src, dst, 0, 1, 0, packet, self.iface.mtu)

    def send_ndp(self, dst_mac: bytes, src: bytes, dst: bytes, msg: Icmpv6Message) -> None:
        """An NDP message straight to ``dst_mac``, hop limit 255 (RFC 4861 7.1)."""
        body = msg.to_bytes(src, dst)
        self._emit(dst_mac, src, dst, PROTO_ICMPV6, 255, 0, body, self.iface.mtu)

    def _resolved(self, dst: bytes, now: float) -> Optional[bytes]:
        """The next hop's MAC when NDP has it (None otherwise, or without a route)."""
        if dst[0] == 0xFF:
            return None
        try:
            hop = self.iface.next_hop(dst, now)
        except OSError:
            return None
        return self.ndp.lookup(hop, now)

    def _flow_template(self, src: bytes, dst: bytes, proto: int, sport: int, dport: int, size: int,
                       now: float) -> Optional[bytes]:
        """For the fast emits: the flow's header template when a ``size``-byte packet fits the path MTU and
        the next hop is resolved, else None (the caller takes the slow path, ``output``)."""
        if size > self.mtu(dst):
            return None
        mac = self._resolved(dst, now)
        if mac is None:
            return None
        return self._template(mac, src, dst, proto, self.ndp.cur_hop_limit or self.hop_limit, 0,
                              _PORTS.pack(sport, dport))

    def emit_udp(self, src: bytes, dst: bytes, sport: int, dport: int, payload, now: float) -> bool:
        """Fast emit of one UDP datagram (see ``IpLayer.emit_udp``); a full TX ring is ENOBUFS."""
        tmpl = self._flow_template(src, dst, PROTO_UDP, sport, dport, 48 + len(payload), now)
        if tmpl is None:
            return False
        slot = self.link.slot()
        if slot is None:
            raise BlockingIOError(errno.ENOBUFS, "No buffer space available (TX ring full)")
        self.link.sent(_fastpath.emit_udp6(slot, tmpl, sport, dport, payload))
        self.stats.inc("ipv6.packets_sent")
        return True

    def emit_tcp(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
                 window: int, ts, payload, now: float) -> bool:
        """Fast emit of one established TCP segment (see ``IpLayer.emit_tcp``)."""
        tmpl = self._flow_template(src, dst, PROTO_TCP, sport, dport,
                                   HEADER_LEN + (32 if ts is not None else 20) + len(payload), now)
        if tmpl is None:
            return False
        slot = self.link.slot()
        if slot is None:
            return False
        if ts is None:
            length = _fastpath.emit_tcp6(slot, tmpl, sport, dport, seq, ack, flags, window, None, 0, payload)
        else:
            length = _fastpath.emit_tcp6(slot, tmpl, sport, dport, seq, ack, flags, window, ts[0], ts[1], payload)
        self.link.sent(length)
        self.stats.inc("ipv6.packets_sent")
        return True

    def tcp_template(self, src: bytes, dst: bytes, sport: int, dport: int, now: float):
        """The cached frame template of an established flow (``_fastpath.TcpTemplate``), or None when the
        neighbour cache would not hand out the next hop's MAC as it is (``emit_tcp`` then decides).

        It copies what ``emit_tcp`` would use (the flow's header template with its flow label and hop
        limit, the path MTU) and is good while ``gen`` stands and until the first of: the route's lifetime,
        the path MTU entry's, and for a REACHABLE neighbour its reachable time (the lookup then moves it to
        STALE and DELAY, RFC 4861 7.3.3: the Python path's). A DELAY or PROBE entry is used as it is (the
        lookup changes nothing; its timers probe it) until it is confirmed or deleted, which bump ``gen``;
        a STALE or INCOMPLETE one gives none (the first lookup of a STALE entry starts DELAY, and bumps).
        """
        if dst[0] == 0xFF:
            return None
        try:
            hop, until = self.iface.next_hop_until(dst, now)
        except OSError:
            return None
        n = self.ndp.cache.get(hop)
        if n is None or n.mac is None:
            return None
        state = n.state
        if state == REACHABLE:
            if not n.reachable_until > now:
                return None
            until = min(until, n.reachable_until)
        elif state != DELAY and state != PROBE:
            return None
        pmtu = self.pmtu.get(dst)
        if pmtu is not None:
            until = min(until, pmtu[1])
        tmpl = self._template(n.mac, src, dst, PROTO_TCP, self.ndp.cur_hop_limit or self.hop_limit, 0,
                              _PORTS.pack(sport, dport))
        return _fastpath.TcpTemplate(tmpl, self.gen, until, self.mtu(dst), None, 0, self.link,
                                     self.stats.counters)

    def invalidate(self) -> None:
        """Something a frame template copies changed (hop limit, interface): rebuild them all."""
        self._templates.clear()
        self.gen.bump()

    def emit_tcp_options(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
                         window: int, options: bytes, now: float) -> bool:
        """Fast emit of a SYN or SYN-ACK (see ``IpLayer.emit_tcp_options``): the frame ``output`` would
        build from the segment (same template, flow label, hop limit), written in C with its checksum."""
        tmpl = self._flow_template(src, dst, PROTO_TCP, sport, dport, HEADER_LEN + 20 + len(options), now)
        if tmpl is None:
            return False
        slot = self.link.slot()
        if slot is None:
            return False
        self.link.sent(_fastpath.emit_tcp_options6(slot, tmpl, sport, dport, seq, ack, flags, window, options))
        self.stats.inc("ipv6.packets_sent")
        return True

    # -- input -----------------------------------------------------------------------
    def martian_source(self, src: bytes, proto: int) -> Optional[str]:
        """The drop reason when ``src`` may not source a packet to us, else None."""
        if src[0] == 0xFF:
            return "ipv6.martian_source.multicast"
        if src == ANY6:
            return None if proto == PROTO_ICMPV6 else "ipv6.martian_source.unspecified"
        if self.loopback:
            return None if src in self.iface.preferred() else "ipv6.martian_source.not_loopback"
        if src == LOOPBACK6:
            return "ipv6.martian_source.loopback"
        if src[:12] == V4_MAPPED:
            return "ipv6.martian_source.v4mapped"
        if proto != PROTO_ICMPV6 and src in self.iface.valid():
            return "ipv6.martian_source.ours"
        return None

    def accepts(self, frame: memoryview, dst: bytes) -> bool:
        """Addressed to us: a preferred unicast address, or a group we joined on its own MAC."""
        if dst[0] == 0xFF:
            return self.iface.accepts_multicast(bytes(frame[0:6]), dst)
        return self.iface.is_ours(dst)

    def input_ext(self, frame: memoryview, pkt, now: float) -> None:
        """A K_IP6 record: walk the extension headers, reassemble, then redeliver the upper layer."""
        stats = self.stats
        src, dst = pkt.src, pkt.dst
        l3 = pkt.l3
        # The Ethernet addresses, kept for the frame the upper layer is redelivered in: a multicast
        # destination is checked again against the group's MAC (RFC 2464 7) on the way back in.
        self._l2 = bytes(frame[0:12])
        packet = bytes(frame[l3:l3 + pkt.total_len])
        try:
            chain = walk(packet, HEADER_LEN, packet[6], self.max_extension_headers)
        except ParameterProblem as e:
            self._problem(e, packet, src, dst, now)
            return
        except WireError as e:
            stats.drop(e.reason)
            return
        frag = chain.fragment
        if frag is not None:
            if frag.atomic:
                stats.inc("ipv6.atomic_fragments")  # RFC 6946: no reassembly queue for it
                self._after_fragment(packet, chain.offset, frag.next_header, src, dst, now, chain.headers)
                return
            self._fragment(packet, chain, src, dst, now)
            return
        self._upper(chain.next_header, chain.nh_pointer, packet, packet[chain.offset:], src, dst, now)

    def _after_fragment(self, packet: bytes, offset: int, nh: int, src: bytes, dst: bytes, now: float,
                        before: tuple = ()) -> None:
        try:
            chain = walk(packet, offset, nh, self.max_extension_headers - len(before))
        except ParameterProblem as e:
            self._problem(e, packet, src, dst, now)
            return
        except WireError as e:
            self.stats.drop(e.reason)
            return
        if chain.fragment is not None:
            self.stats.drop("ipv6.nested_fragment")
            return
        self._upper(chain.next_header, chain.nh_pointer, packet, packet[chain.offset:], src, dst, now)

    def _fragment(self, packet: bytes, chain, src: bytes, dst: bytes, now: float) -> None:
        stats = self.stats
        frag = chain.fragment
        data = packet[chain.offset:]
        if frag.more and (len(data) % 8 or not data):
            # RFC 8200 4.5: code 0 pointing at the Payload Length field.
            stats.drop("ipv6.frag_bad_length")
            self._error(4, PP_ERRONEOUS_FIELD, packet, src, dst, now, rest=4)
            return
        if frag.offset + len(data) > 65535:
            stats.drop("ipv6.frag_too_long")
            self._error(4, PP_ERRONEOUS_FIELD, packet, src, dst, now, rest=chain.offset - 6)
            return
        if frag.offset == 0:
            # RFC 7112: the first fragment holds the whole header chain up to the upper-layer header.
            try:
                rest = walk(packet, chain.offset, frag.next_header, self.max_extension_headers)
                if rest.next_header in (PROTO_TCP, PROTO_UDP, PROTO_ICMPV6):
                    need = {PROTO_TCP: 20, PROTO_UDP: 8, PROTO_ICMPV6: 4}[rest.next_header]
                    if len(packet) < rest.offset + need:
                        raise WireError("ipv6.truncated")
            except ParameterProblem as e:
                self._problem(e, packet, src, dst, now)
                return
            except WireError:
                stats.drop("ipv6.frag_incomplete_chain")
                self._error(4, PP_INCOMPLETE_CHAIN, packet, src, dst, now, rest=0)
                return
        header = packet[:chain.offset - 8] + bytes((frag.next_header,))
        whole = self.reassembler.add((src, dst, frag.ident), frag.offset, data, frag.more, header, now)
        if whole is None:
            return
        first = self.reassembler.completed_header
        unfrag, nh = first[:-1], first[-1]
        # The fragmentable part may start with more extension headers (e.g. destination options).
        rebuilt = unfrag + whole
        if len(rebuilt) - HEADER_LEN > 65535:
            stats.drop("ipv6.frag_too_long")
            return
        self._after_fragment(rebuilt, len(unfrag), nh, src, dst, now)

    def _upper(self, nh: int, pointer: int, packet: bytes, upper: bytes, src: bytes, dst: bytes,
               now: float) -> None:
        stats = self.stats
        if nh == NH_NO_NEXT:
            stats.drop("ipv6.no_next_header")
            return
        if nh not in UPPER_LAYERS:
            stats.drop("ipv6.unknown_next_header")
            # RFC 8200 4: unrecognized Next Header, code 1, pointer at the field that named it.
            self._error(4, PP_UNRECOGNIZED_NEXT_HEADER, packet, src, dst, now, rest=pointer)
            return
        n = len(upper)
        frame = bytearray(14 + HEADER_LEN + n)
        frame[0:12] = self._l2
        frame[12:14] = b"\x86\xdd"
        frame[14:18] = packet[0:4]
        frame[18:20] = n.to_bytes(2, "big")
        frame[20] = nh
        frame[21] = packet[7]
        frame[22:54] = packet[8:40]
        frame[54:] = upper
        synthetic = bytes(frame)
        self.redeliver(memoryview(synthetic), _fastpath.classify_one(synthetic, None), now)

    def _problem(self, e: ParameterProblem, packet: bytes, src: bytes, dst: bytes, now: float) -> None:
        self.stats.drop(e.reason)
        if e.send_icmp and (e.multicast_ok or dst[0] != 0xFF):
            self._error(4, e.code, packet, src, dst, now, rest=e.pointer, multicast_ok=dst[0] == 0xFF)

    def _error(self, itype: int, code: int, packet: bytes, src: bytes, dst: bytes, now: float, rest: int = 0,
               multicast_ok: bool = False) -> None:
        if self.send_error is not None:  # (the frame input_ext is working on: its destination MAC's group bit)
            self.send_error(itype, code, packet, src, now, rest=rest, multicast_ok=multicast_ok,
                            link_group=bool(self._l2[0] & 1))

    def _reassembly_timeout(self, header: bytes, first_data: bytes, now: float) -> None:
        # RFC 8200 4.5: Time Exceeded code 1 to the source, if fragment zero arrived.
        unfrag = header[:-1]
        if len(unfrag) >= HEADER_LEN and self.send_error is not None:
            self.send_error(3, 1, unfrag + first_data, bytes(unfrag[8:24]), now)
