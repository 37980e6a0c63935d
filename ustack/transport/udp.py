"""UDP (RFC 768): endpoints, demux, receive queues, send through the fast path.

Demux is a dict lookup, most specific first: connected 4-tuple, then
(local address, port), then (wildcard, port). A datagram for a port with no
endpoint gets a (rate-limited) ICMP port unreachable (RFC 1122 4.1.3.1)
through ``unreachable``. Each endpoint has a receive queue bounded in bytes
(``rcvbuf``, like SO_RCVBUF); overflow drops the datagram
(``udp.rcvbuf_full``) and counts it on the endpoint too.

What a queued datagram costs against ``rcvbuf`` is its payload plus a fixed
``datagram_overhead`` (default 768 bytes), as Linux charges an skb's
truesize (payload + the sk_buff and shared-info bookkeeping: 768 bytes for a
small frame on x86-64) against sk_rcvbuf: empty datagrams are not free, so
at the default 212,992-byte rcvbuf at most 277 empty ones queue, as on Linux.
``queued_bytes`` stays the payload bytes (what recv will return);
``rmem`` is the charged total.

Sending reaches the network layer only through ``IpLayer``: a datagram
that fits the MTU is written straight into a TX slot from a per-flow
template (``ip.emit_udp``: one copy, one C call for headers and checksum);
otherwise (first packet to a host, broadcast, needs fragmentation) the
datagram is built once with ``ustack.wire.udp`` and handed to
``ip.output``. Addresses are packed bytes (``ustack.net.addr``); local ports
follow the rules of ``ustack.transport.ports``.

IPv6 (``ip6``/``iface6``, set by the Stack when it has IPv6): datagrams
come to ``input6`` (K_UDP6 records, already checked to be for one of our
addresses or groups) and leave through the IPv6 layer when the destination
is 16 bytes long. An endpoint bound to :: is dual-stack (it hears IPv4
too, as a Linux socket without IPV6_V6ONLY), one bound to 0.0.0.0 only
IPv4; the two overlap for the port rules as on Linux.
"""

from __future__ import annotations

import errno
from collections import deque
from typing import Callable, Optional

from ustack.net.addr import ANY4, ANY6
from ustack.net.ip import IpLayer
from ustack.net.route import Interface
from ustack.stats import Stats
from ustack.transport.ports import EphemeralPorts, check_port, conflicts
from ustack.wire.icmp import error_to_oserror
from ustack.wire.proto import PROTO_UDP
from ustack.wire.udp import HEADER_LEN, UdpHeader

MAX_PAYLOAD = 65507  # 65535 - 20 (IPv4 header) - 8 (UDP header)
MAX_PAYLOAD6 = 65527  # 65535 (IPv6 payload length) - 8 (UDP header); no jumbograms
DATAGRAM_OVERHEAD = 768  # charged per queued datagram on top of its payload (Linux: skb truesize of a small frame)


class UdpEndpoint:
    """The protocol side of one UDP socket (no blocking here; see ustack.api)."""

    __slots__ = ("layer", "local_addr", "local_port", "remote", "rcvbuf", "queue", "queued_bytes", "rmem", "drops",
                 "error", "closed", "on_readable", "broadcast", "ckey", "v6only")

    def __init__(self, layer: "UdpLayer", rcvbuf: int):
        self.layer = layer
        self.local_addr = ANY4
        self.local_port = 0
        self.remote: Optional[tuple[bytes, int]] = None
        self.rcvbuf = rcvbuf
        self.queue: deque = deque()  # (payload bytes, src addr, src port)
        self.queued_bytes = 0
        self.rmem = 0  # payload + per-datagram overhead of everything queued (charged against rcvbuf)
        self.drops = 0
        self.error: Optional[OSError] = None  # pending asynchronous error (ICMP)
        self.closed = False
        self.on_readable: Optional[Callable[[], None]] = None
        self.broadcast = False
        self.ckey: Optional[tuple] = None  # (laddr, lport, raddr, rport) in UdpLayer.connected once connected
        self.v6only = False  # bound to ::, hear IPv6 only (IPV6_V6ONLY)

    @property
    def bound(self) -> bool:
        return self.local_port != 0

    def take_error(self) -> Optional[OSError]:
        err, self.error = self.error, None
        return err

    def deliver(self, payload: bytes, src: bytes, sport: int) -> None:
        size = len(payload)
        cost = size + self.layer.datagram_overhead
        if self.rmem + cost > self.rcvbuf and self.queue:
            self.drops += 1
            self.layer.stats.drop("udp.rcvbuf_full")
            return
        self.queue.append((payload, src, sport))
        self.queued_bytes += size
        self.rmem += cost
        self.layer.stats.inc("udp.datagrams_received")
        if self.on_readable is not None:
            self.on_readable()

    def pop(self) -> tuple[bytes, bytes, int]:
        item = self.queue.popleft()
        size = len(item[0])
        self.queued_bytes -= size
        self.rmem -= size + self.layer.datagram_overhead
        return item

    def sendto(self, payload, dst: bytes, dport: int, now: float) -> int:
        return self.layer.send(self, payload, dst, dport, now)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.layer.unbind(self)
            self.queue.clear()
            self.queued_bytes = 0
            self.rmem = 0


class UdpLayer:
    """All UDP endpoints of one stack."""

    def __init__(self, ip: IpLayer, iface: Interface, stats: Stats, port_secret: bytes,
                 unreachable: Callable[[memoryview, bytes, float], None], *, default_rcvbuf: int = 212992,
                 datagram_overhead: int = DATAGRAM_OVERHEAD):
        self.ip = ip
        self.iface = iface
        self.stats = stats
        self.unreachable = unreachable  # (offending datagram from its IP header, its source, now, link_group)
        self.default_rcvbuf = default_rcvbuf
        self.datagram_overhead = datagram_overhead
        self.bound: dict[tuple[bytes, int], UdpEndpoint] = {}  # (local addr or wildcard, port)
        self.connected: dict[tuple[bytes, int, bytes, int], UdpEndpoint] = {}  # (laddr, lport, raddr, rport)
        self.ports = EphemeralPorts(port_secret, b"udp")
        self.ip6: Optional[IpLayer] = None  # set by the Stack when it has IPv6
        self.iface6 = None
        self.unreachable6: Optional[Callable[[memoryview, bytes, float], None]] = None

    def endpoint(self) -> UdpEndpoint:
        return UdpEndpoint(self, self.default_rcvbuf)

    def endpoints(self) -> list[UdpEndpoint]:
        """Every bound endpoint (for snapshots)."""
        return list(self.bound.values())

    # -- binding ----------------------------------------------------------------
    def bind(self, ep: UdpEndpoint, addr: bytes, port: int) -> None:
        if ep.bound:
            raise OSError(errno.EINVAL, "Invalid argument (already bound)")
        iface = self.iface
        if len(addr) == 16:
            if addr != ANY6 and (self.iface6 is None or not self.iface6.is_ours(addr)):
                raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
        elif not iface.is_ours(addr) and not iface.is_broadcast(addr):
            raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
        check_port(port)
        if port == 0:
            port = self.ports.pick_unconnected(addr, lambda p: conflicts(addr, p, self.bound))
        elif conflicts(addr, port, self.bound):
            raise OSError(errno.EADDRINUSE, "Address already in use")
        ep.local_addr, ep.local_port = addr, port
        self.bound[(addr, port)] = ep

    def connect(self, ep: UdpEndpoint, dst: bytes, dport: int) -> None:
        if not ep.bound:
            self.bind(ep, ANY4 if len(dst) == 4 else ANY6, 0)
        if len(dst) == 4:  # IPv4 has one address: no route needed to know it
            laddr = ep.local_addr if ep.local_addr not in (ANY4, ANY6) else self.iface.addr
        else:
            laddr = self._source(ep, dst)
        if ep.ckey is not None:
            self.connected.pop(ep.ckey, None)
        ep.remote = (dst, dport)
        ep.ckey = (laddr, ep.local_port, dst, dport)
        self.connected[ep.ckey] = ep

    def _ip(self, dst: bytes) -> IpLayer:
        ip = self.ip if len(dst) == 4 else self.ip6
        if ip is None:
            raise OSError(errno.ENETUNREACH, "Network is unreachable (no IPv6 on this stack)")
        return ip

    def _source(self, ep: UdpEndpoint, dst: bytes) -> bytes:
        """The source address toward ``dst``: the bound address, or the route's choice for a wildcard."""
        laddr = ep.local_addr
        if laddr == ANY4 or laddr == ANY6 or self.iface.is_broadcast(laddr):
            if laddr == ANY4 and len(dst) == 16:
                raise OSError(errno.EAFNOSUPPORT, "Address family not supported (IPv4 socket, IPv6 destination)")
            return self._ip(dst).source(dst)
        if len(laddr) != len(dst):
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported (bound to the other IP version)")
        return laddr

    def unbind(self, ep: UdpEndpoint) -> None:
        if ep.bound and self.bound.get((ep.local_addr, ep.local_port)) is ep:
            del self.bound[(ep.local_addr, ep.local_port)]
        if ep.ckey is not None:
            self.connected.pop(ep.ckey, None)

    # -- input ------------------------------------------------------------------
    def input(self, frame: memoryview, pkt, now: float) -> None:
        """One datagram (a K_UDP record: header and checksum verified by classify)."""
        iface = self.iface
        src, dst, sport, dport = pkt.src, pkt.dst, pkt.src_port, pkt.dst_port
        if not iface.is_local_dest(dst):
            self.stats.drop("ipv4.not_for_us")
            return
        ep = self.connected.get((dst, dport, src, sport))
        if ep is None and dst != iface.addr:
            ep = self.connected.get((iface.addr, dport, src, sport))  # (a broadcast to a connected socket)
        if ep is None:
            bound = self.bound
            ep = bound.get((dst, dport)) or bound.get((ANY4, dport))
            if ep is None:
                ep = bound.get((ANY6, dport))
                if ep is not None and ep.v6only:
                    ep = None
            if ep is None and dst != iface.addr:
                ep = bound.get((iface.addr, dport))
            if ep is not None and ep.remote is not None and ep.remote != (src, sport):
                ep = None  # a connected socket only hears its peer
        if ep is None:
            self.stats.drop("udp.no_socket")
            if iface.owns(dst):
                # RFC 1122 4.1.3.1: port unreachable (rate-limited, never for broadcasts)
                self.unreachable(frame[pkt.l3:pkt.l3 + pkt.total_len], src, now, pkt.link_group)
            return
        off = pkt.payload_off
        ep.deliver(bytes(frame[off:off + pkt.payload_len]), src, sport)

    def input6(self, frame: memoryview, pkt, now: float) -> None:
        """One IPv6 datagram (a K_UDP6 record: checksum verified, for one of our addresses or groups)."""
        src, dst, sport, dport = pkt.src, pkt.dst, pkt.src_port, pkt.dst_port
        ep = self.connected.get((dst, dport, src, sport))
        if ep is None:
            bound = self.bound
            ep = bound.get((dst, dport)) or bound.get((ANY6, dport))
            if ep is not None and ep.remote is not None and ep.remote != (src, sport):
                ep = None
        if ep is None:
            self.stats.drop("udp.no_socket")
            if dst[0] != 0xFF and self.unreachable6 is not None:
                self.unreachable6(frame[pkt.l3:pkt.l3 + pkt.total_len], src, now, pkt.link_group)  # RFC 4443 3.1 code 4
            return
        off = pkt.payload_off
        ep.deliver(bytes(frame[off:off + pkt.payload_len]), src, sport)

    def icmp_error(self, src: bytes, sport: int, dst: bytes, dport: int, itype: int, code: int, info: int,
                   quoted: bytes, now: float) -> None:
        """An ICMP error about a datagram we sent: surfaced on a connected endpoint (RFC 1122 4.1.3.3)."""
        ep = self.connected.get((src, sport, dst, dport))
        if ep is None:
            self.stats.drop("icmp.error_no_socket")
            return
        ep.error = error_to_oserror(itype, code)
        if ep.on_readable is not None:
            ep.on_readable()

    # -- output -----------------------------------------------------------------
    def send(self, ep: UdpEndpoint, payload, dst: bytes, dport: int, now: float) -> int:
        iface = self.iface
        if not 0 < dport <= 0xFFFF:
            raise OSError(errno.EINVAL, "Invalid argument (destination port)")
        if iface.is_broadcast(dst) and not ep.broadcast:
            raise PermissionError(errno.EACCES, "Permission denied (broadcast needs SO_BROADCAST)")
        if not ep.bound:
            self.bind(ep, ANY4 if len(dst) == 4 else ANY6, 0)
        n = len(payload)
        if n > (MAX_PAYLOAD if len(dst) == 4 else MAX_PAYLOAD6):
            raise OSError(errno.EMSGSIZE, "Message too long")
        src = self._source(ep, dst)
        ip = self._ip(dst)
        sport = ep.local_port
        if not ip.emit_udp(src, dst, sport, dport, payload, now):
            # Slow path: first packet to a host (ARP), broadcast, needs fragmentation, or no TX slot.
            length = HEADER_LEN + n
            dgram = bytearray(length)
            UdpHeader(sport, dport, length).emit(dgram, 0, src, dst, payload)
            ip.output(src, dst, PROTO_UDP, dgram, now)
        self.stats.inc("udp.datagrams_sent")
        return n
