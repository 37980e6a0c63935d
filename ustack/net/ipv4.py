"""IPv4 (RFC 791, RFC 1122 section 3.3): the first ``IpLayer``; output, fragments, reassembly.

Output: ``output(src, dst, proto, payload, now)`` routes (connected subnet
or default gateway), resolves the next hop through ARP (queueing while it
resolves), and writes frames straight into TX slots from an Ethernet+IPv4
header template via the fast path. A payload larger than the MTU is
fragmented (RFC 791 section 3.2: data in multiples of 8 bytes, MF on all but
the last) unless DF is asked for, which fails with EMSGSIZE. ``emit_udp`` /
``emit_tcp`` are the fast emits for established flows (see ``IpLayer``).

Input: ordinary datagrams are demultiplexed by the Stack from the fast
path's classify records; fragments come to ``input_fragment`` and go
through the Reassembler, then back through classify as one synthetic frame
(``redeliver``) so L4 validation has one home. A reassembly timeout with
fragment zero held reports ICMP time exceeded through ``on_time_exceeded``.

Martian sources (RFC 1812 section 5.3.7, RFC 1122 section 3.2.1.3): the
Stack asks ``martian_source`` of every IPv4 datagram before a transport or
the reassembler sees it, and drops it under ``ipv4.martian_source.<kind>``:
a broadcast source (limited or our subnet's), multicast (224/4), reserved
(240/4), 0.0.0.0 and the rest of 0/8 ("this network"), loopback (127/8)
and our own address (a LAND attack would make us talk to ourselves). One
exception, as RFC 1122 3.2.1.3 (a) and RFC 2131 section 4.1 allow: 0.0.0.0
as the source of a UDP datagram to port 67 (a DHCP/BOOTP client that has
no address yet), when ``allow_unspecified_dhcp`` (the default).
"""

from __future__ import annotations

import errno
import os
import struct
from typing import Callable, Optional

from ustack import _fastpath
from ustack.net.addr import ANY4, BROADCAST4
from ustack.net.arp import ArpLayer
from ustack.net.fragment import fragment, piece_size
from ustack.net.ipid import DEFAULT_BUCKETS, IpIdents
from ustack.net.link import BROADCAST_MAC, Link
from ustack.net.reassembly import Reassembler
from ustack.net.route import Interface
from ustack.stats import Stats
from ustack.timers import TimerHeap
from ustack.wire.proto import PROTO_ICMP, PROTO_TCP, PROTO_UDP

DEFAULT_TTL = 64
HEADER_LEN = 20
_IP_TEMPLATE = struct.Struct("!6s6sHBBHHHBBH4s4s")
IP_DF = 0x4000
IP_MF = 0x2000
DHCP_SERVER_PORT = 67
MAX_TEMPLATES = 4096  # per-flow header templates kept (a bound remote traffic cannot push past)


class Ipv4Layer:
    """IPv4 on one interface: implements ``ustack.net.ip.IpLayer``."""

    version = 4
    header_len = HEADER_LEN

    def __init__(self, link: Link, iface: Interface, arp: ArpLayer, timers: TimerHeap, stats: Stats, *,
                 ttl: int = DEFAULT_TTL, reassembly_timeout: float = 30.0, reassembly_max_bytes: int = 4 << 20,
                 reassembly_max_datagrams: int = 64, allow_unspecified_dhcp: bool = True,
                 id_secret: Optional[bytes] = None, id_buckets: int = DEFAULT_BUCKETS):
        self.link = link
        self.loopback = False  # set by the Stack on a loopback interface: 127/8 sources are ours
        self.allow_unspecified_dhcp = allow_unspecified_dhcp
        self.iface = iface
        self.arp = arp
        self.stats = stats
        self.ttl = ttl
        # RFC 7739 5.4: IDs from per-destination counters picked by a keyed hash, not one global counter.
        self.idents = IpIdents(id_secret if id_secret is not None else os.urandom(16), id_buckets)
        self.reassembler = Reassembler(timers, stats, timeout=reassembly_timeout,
                                       max_bytes=reassembly_max_bytes, max_datagrams=reassembly_max_datagrams,
                                       on_timeout=self._reassembly_timeout)
        # Set by the Stack: where a reassembled datagram goes (the demux), and who reports time exceeded.
        self.redeliver: Optional[Callable[[memoryview, object, float], None]] = None
        self.on_time_exceeded: Optional[Callable[[bytes, bytes, float], None]] = None
        # One cache of header templates for every flow: (dst_mac, src, dst, proto, ttl, tos) -> bytes.
        self._templates: dict[tuple, bytes] = {}
        # What validates the per-flow frame templates (``tcp_template``): the ARP layer's, bumped here too.
        self.gen = arp.gen

    # -- routing (IpLayer) ----------------------------------------------------------
    def source(self, dst: bytes) -> bytes:
        self.iface.next_hop(dst)  # raises ENETUNREACH when there is no route
        return self.iface.addr

    def mtu(self, dst: bytes) -> int:
        return self.iface.mtu

    # -- output ---------------------------------------------------------------------
    def next_ident(self, src: bytes, dst: bytes, proto: int) -> int:
        """The Identification of the next datagram from ``src`` to ``dst`` (``ustack.net.ipid``)."""
        return self.idents.next(src, dst, proto)

    def template(self, dst_mac: bytes, src: bytes, dst: bytes, proto: int, ttl: int, tos: int = 0) -> bytes:
        """Ethernet + IPv4 header for a flow, per-packet fields zero (cached, bounded)."""
        key = (dst_mac, src, dst, proto, ttl, tos)
        t = self._templates.get(key)
        if t is None:
            if len(self._templates) >= MAX_TEMPLATES:
                self._templates.clear()
            t = _IP_TEMPLATE.pack(dst_mac, self.link.mac, 0x0800, 0x45, tos, 0, 0, 0, ttl, proto, 0, src, dst)
            self._templates[key] = t
        return t

    def _resolved(self, dst: bytes, now: float) -> Optional[bytes]:
        """The next hop's MAC when it is in the ARP cache (None otherwise; OSError when no route)."""
        return self.arp.lookup(self.iface.next_hop(dst), now)

    def output(self, src: bytes, dst: bytes, proto: int, payload, now: float, *, ttl: Optional[int] = None,
               tos: int = 0, df: bool = False) -> None:
        """Send one IPv4 datagram carrying ``payload`` (an L4 message, checksum done)."""
        iface = self.iface
        if ttl is None:
            ttl = self.ttl
        mtu = iface.mtu
        if df and len(payload) + HEADER_LEN > mtu:
            raise OSError(errno.EMSGSIZE, "Message too long (DF set and larger than the MTU)")
        if len(payload) + HEADER_LEN > 65535:
            raise OSError(errno.EMSGSIZE, "Message too long for IPv4")
        if iface.addr is None:
            iface.next_hop(dst)  # unnumbered (an IPv6-only stack): ENETUNREACH, even for broadcasts
        if iface.is_broadcast(dst):
            self._emit(BROADCAST_MAC, src, dst, proto, ttl, tos, df, payload)
            return
        hop = iface.next_hop(dst)
        mac = self.arp.lookup(hop, now)
        if mac is not None:
            self._emit(mac, src, dst, proto, ttl, tos, df, payload)
            return
        data = bytes(payload)  # must outlive the caller's buffer while ARP resolves
        self.arp.resolve_then(hop, lambda m: self._emit(m, src, dst, proto, ttl, tos, df, data), now)

    def _emit(self, dst_mac: bytes, src: bytes, dst: bytes, proto: int, ttl: int, tos: int, df: bool,
              payload) -> None:
        link = self.link
        stats = self.stats
        tmpl = self.template(dst_mac, src, dst, proto, ttl, tos)
        ident = self.next_ident(src, dst, proto)
        mtu = self.iface.mtu
        n = len(payload)
        if n + HEADER_LEN <= mtu:
            slot = link.slot()
            if slot is None:
                return
            link.sent(_fastpath.emit_ipv4(slot, tmpl, ident, IP_DF if df else 0, payload))
            stats.inc("ipv4.packets_sent")
            return
        # RFC 791 section 3.2: fragment data in multiples of 8 octets, MF on all but the last.
        if fragment(link, payload, piece_size(mtu, HEADER_LEN),
                    lambda slot, off, piece, more: _fastpath.emit_ipv4(slot, tmpl, ident,
                                                                       (IP_MF if more else 0) | (off >> 3), piece),
                    stats, "ipv4.fragments_sent"):
            stats.inc("ipv4.packets_sent")

    def emit_udp(self, src: bytes, dst: bytes, sport: int, dport: int, payload, now: float) -> bool:
        """Fast emit of one UDP datagram (see ``IpLayer.emit_udp``); a full TX ring is ENOBUFS."""
        if 28 + len(payload) > self.iface.mtu or self.iface.is_broadcast(dst):
            return False
        mac = self._resolved(dst, now)
        if mac is None:
            return False
        slot = self.link.slot()
        if slot is None:
            raise BlockingIOError(errno.ENOBUFS, "No buffer space available (TX ring full)")
        # The UDP template is the IP template with the ports appended (length and checksum left zero).
        key = (mac, src, dst, sport, dport)  # five fields: never equal to an IP template's six
        tmpl = self._templates.get(key)
        if tmpl is None:
            if len(self._templates) >= MAX_TEMPLATES:
                self._templates.clear()
            tmpl = self.template(mac, src, dst, PROTO_UDP, self.ttl) + struct.pack("!HHI", sport, dport, 0)
            self._templates[key] = tmpl
        self.link.sent(_fastpath.emit_udp(slot, tmpl, self.next_ident(src, dst, PROTO_UDP), payload))
        self.stats.inc("ipv4.packets_sent")
        return True

    def _tcp_slot(self, src: bytes, dst: bytes, now: float):
        """What a fast TCP emit writes into: (a TX slot, the flow's header template), or None when the
        next hop is not resolved (or unroutable) or the ring is full (the general path then decides)."""
        try:
            mac = self._resolved(dst, now)
        except OSError:
            return None
        if mac is None:
            return None
        slot = self.link.slot()
        if slot is None:
            return None
        return slot, self.template(mac, src, dst, PROTO_TCP, self.ttl)

    def emit_tcp(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
                 window: int, ts, payload, now: float) -> bool:
        """Fast emit of one established TCP segment (see ``IpLayer.emit_tcp``)."""
        if HEADER_LEN + (32 if ts is not None else 20) + len(payload) > self.iface.mtu:
            return False
        got = self._tcp_slot(src, dst, now)
        if got is None:
            return False
        slot, tmpl = got
        ident = self.next_ident(src, dst, PROTO_TCP)
        if ts is None:
            length = _fastpath.emit_tcp(slot, tmpl, ident, sport, dport, seq, ack, flags, window,
                                        None, 0, payload)
        else:
            length = _fastpath.emit_tcp(slot, tmpl, ident, sport, dport, seq, ack, flags, window,
                                        ts[0], ts[1], payload)
        self.link.sent(length)
        self.stats.inc("ipv4.packets_sent")
        return True

    def tcp_template(self, src: bytes, dst: bytes, sport: int, dport: int, now: float):
        """The cached frame template of an established flow (``_fastpath.TcpTemplate``), or None when the
        neighbour is not fresh in the ARP cache or there is no route (``emit_tcp`` then decides).

        It copies what ``emit_tcp`` would use (header template, MTU, the flow's IP ID counter) and is
        good while ``gen`` stands and the ARP entry has not expired.
        """
        try:
            hop = self.iface.next_hop(dst)
        except OSError:
            return None
        entry = self.arp.cache.get(hop)
        if entry is None or not entry[1] > now:
            return None  # unresolved, or stale (the lookup's poll is the Python path's)
        idents = self.idents
        return _fastpath.TcpTemplate(self.template(entry[0], src, dst, PROTO_TCP, self.ttl), self.gen, entry[1],
                                     self.iface.mtu, idents.counters, idents.bucket(src, dst, PROTO_TCP), self.link,
                                     self.stats.counters)

    def echo_template(self, src: bytes, dst: bytes, now: float):
        """The cached frame of an ICMP echo reply from ``src`` to ``dst`` (``_fastpath.EchoTemplate``: what
        ``output`` writes for it), or None when the next hop is not fresh in the ARP cache or unroutable."""
        try:
            hop = self.iface.next_hop(dst)
        except OSError:
            return None
        entry = self.arp.cache.get(hop)
        if entry is None or not entry[1] > now or self.iface.is_broadcast(dst):
            return None
        idents = self.idents
        return _fastpath.EchoTemplate(self.template(entry[0], src, dst, PROTO_ICMP, self.ttl), self.gen, entry[1],
                                      self.iface.mtu, idents.counters, idents.bucket(src, dst, PROTO_ICMP))

    def invalidate(self) -> None:
        """Something a frame template copies changed (TTL, interface, route): rebuild them all."""
        self._templates.clear()
        self.gen.bump()

    def emit_tcp_options(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
                         window: int, options: bytes, now: float) -> bool:
        """Fast emit of a SYN or SYN-ACK (see ``IpLayer.emit_tcp_options``): the frame ``output`` would
        build from the segment (same template, IP ID and DF), written in C with its checksums."""
        if HEADER_LEN + 20 + len(options) > self.iface.mtu or self.iface.is_broadcast(dst):
            return False
        got = self._tcp_slot(src, dst, now)
        if got is None:
            return False
        slot, tmpl = got
        self.link.sent(_fastpath.emit_tcp_options(slot, tmpl, self.next_ident(src, dst, PROTO_TCP), sport, dport,
                                                  seq, ack, flags, window, options))
        self.stats.inc("ipv4.packets_sent")
        return True

    # -- input ----------------------------------------------------------------------
    def martian_source(self, src: bytes, proto: int, dport: int) -> Optional[str]:
        """The drop reason when ``src`` may not source a datagram to us (RFC 1812 5.3.7), else None."""
        first = src[0]
        if first == 0:
            if src == ANY4:
                if self.allow_unspecified_dhcp and proto == PROTO_UDP and dport == DHCP_SERVER_PORT:
                    return None  # RFC 1122 3.2.1.3 (a): a host learning its address (DHCP/BOOTP)
                return "ipv4.martian_source.unspecified"
            return "ipv4.martian_source.this_network"
        if first == 127:  # RFC 1122 3.2.1.3 (g): never on a wire; a loopback interface is where they live
            return None if self.loopback else "ipv4.martian_source.loopback"
        if first >= 224:
            if src == BROADCAST4:
                return "ipv4.martian_source.broadcast"
            return "ipv4.martian_source.multicast" if first < 240 else "ipv4.martian_source.reserved"
        iface = self.iface
        if src == iface.addr and not self.loopback:
            return "ipv4.martian_source.ours"
        if src == iface.broadcast and iface.prefixlen < 31:
            return "ipv4.martian_source.broadcast"
        return None

    def input_fragment(self, frame: memoryview, pkt, now: float) -> None:
        """One fragment (a K_FRAG record): reassemble, then hand the whole datagram to ``redeliver``."""
        stats = self.stats
        if not self.iface.is_local_dest(pkt.dst):
            stats.drop("ipv4.not_for_us")
            return
        l3, l4 = pkt.l3, pkt.l4
        fragfield = (frame[l3 + 6] << 8) | frame[l3 + 7]
        ident = (frame[l3 + 4] << 8) | frame[l3 + 5]
        offset = (fragfield & 0x1FFF) << 3
        more = bool(fragfield & IP_MF)
        src, dst, proto = pkt.src, pkt.dst, pkt.proto
        whole = self.reassembler.add((src, dst, proto, ident), offset, frame[l4:l4 + pkt.payload_len], more,
                                     frame[l3:l4], now)
        if whole is None:
            return
        if HEADER_LEN + len(whole) > 65535:
            stats.drop("ipv4.frag_too_long")
            return
        # Rebuild one unfragmented frame and run it through classify again.
        # (to the last fragment's destination MAC: a link-layer broadcast draws no ICMP error, RFC 1122 3.2.2)
        hdr = bytearray(_IP_TEMPLATE.pack(bytes(frame[0:6]), b"\0" * 6, 0x0800, 0x45, 0, HEADER_LEN + len(whole), ident,
                                          0, frame[l3 + 8], proto, 0, src, dst))
        csum = _fastpath.checksum(memoryview(hdr)[14:34])
        hdr[24:26] = csum.to_bytes(2, "big")
        synthetic = bytes(hdr) + whole
        self.redeliver(memoryview(synthetic), _fastpath.classify_one(synthetic, None), now)

    def _reassembly_timeout(self, header: bytes, first_data: bytes, now: float) -> None:
        # RFC 792 / RFC 1122 3.3.2: time exceeded, code 1 (reassembly), if fragment 0 arrived.
        src = bytes(header[12:16])
        if src == BROADCAST4 or self.iface.is_broadcast(src):
            return
        if self.on_time_exceeded is not None:
            self.on_time_exceeded(header + first_data, src, now)
