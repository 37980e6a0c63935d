"""UDP (RFC 768): endpoints, demux, receive queues, send through the fast path.

Demux is a dict lookup, most specific first: connected 4-tuple, then
(local address, port), then (wildcard, port). A datagram for a port with no
endpoint gets a (rate-limited) ICMP port unreachable (RFC 1122 4.1.3.1).
Each endpoint has a receive queue bounded in bytes (``rcvbuf``, like
SO_RCVBUF); overflow drops the datagram (``udp.rcvbuf_full``) and counts it
on the endpoint too.

Sending a datagram that fits the MTU writes Ethernet+IPv4+UDP headers and
the payload straight into a TX slot from a per-flow template (one copy, one
C call for the headers and the checksum); larger datagrams are built once
and fragmented by IPv4.
"""

from __future__ import annotations

import errno
from collections import deque
from typing import TYPE_CHECKING, Callable, Optional

from ustack import _fastpath
from ustack.net.route import LIMITED_BROADCAST

if TYPE_CHECKING:
    from ustack.stack import Stack

PROTO_UDP = 17
EPHEMERAL_LOW, EPHEMERAL_HIGH = 32768, 60999  # Linux ip_local_port_range


class UdpEndpoint:
    """The protocol side of one UDP socket (no blocking here; see ustack.api.socket)."""

    def __init__(self, layer: "UdpLayer", rcvbuf: int):
        self.layer = layer
        self.local_addr = 0
        self.local_port = 0
        self.remote: Optional[tuple[int, int]] = None
        self.rcvbuf = rcvbuf
        self.queue: deque = deque()  # (payload bytes, src addr int, src port)
        self.queued_bytes = 0
        self.drops = 0
        self.error: Optional[OSError] = None  # pending asynchronous error (ICMP)
        self.closed = False
        self.on_readable: Optional[Callable[[], None]] = None
        self.broadcast = False

    @property
    def bound(self) -> bool:
        return self.local_port != 0

    def take_error(self) -> Optional[OSError]:
        err, self.error = self.error, None
        return err

    def deliver(self, payload: bytes, src: int, sport: int) -> None:
        size = len(payload)
        if self.queued_bytes + size > self.rcvbuf and self.queue:
            self.drops += 1
            self.layer.stack.stats.drop("udp.rcvbuf_full")
            return
        self.queue.append((payload, src, sport))
        self.queued_bytes += size
        self.layer.stack.stats.inc("udp.datagrams_received")
        if self.on_readable is not None:
            self.on_readable()

    def pop(self) -> tuple[bytes, int, int]:
        item = self.queue.popleft()
        self.queued_bytes -= len(item[0])
        return item

    def sendto(self, payload, dst: int, dport: int, now: float) -> int:
        return self.layer.send(self, payload, dst, dport, now)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.layer.unbind(self)
            self.queue.clear()
            self.queued_bytes = 0


class UdpLayer:
    def __init__(self, stack: "Stack", *, default_rcvbuf: int = 212992):
        self.stack = stack
        self.default_rcvbuf = default_rcvbuf
        self.bound: dict[tuple[int, int], UdpEndpoint] = {}  # (local addr or 0, port)
        self.connected: dict[tuple[int, int, int, int], UdpEndpoint] = {}  # (laddr, lport, raddr, rport)
        self._next_port = EPHEMERAL_LOW
        self._templates: dict[tuple, bytes] = {}

    def endpoint(self) -> UdpEndpoint:
        return UdpEndpoint(self, self.default_rcvbuf)

    # -- binding ----------------------------------------------------------------
    def bind(self, ep: UdpEndpoint, addr: int, port: int) -> None:
        if ep.bound:
            raise OSError(errno.EINVAL, "Invalid argument (already bound)")
        iface = self.stack.iface
        if addr not in (0, iface.addr) and not iface.is_broadcast(addr):
            raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
        if not 0 <= port <= 0xFFFF:
            raise OverflowError("bind(): port must be 0-65535.")
        if port == 0:
            port = self._ephemeral(addr)
        elif (addr, port) in self.bound or (0, port) in self.bound or (addr == 0 and any(
                p == port for (_, p) in self.bound)):
            raise OSError(errno.EADDRINUSE, "Address already in use")
        ep.local_addr, ep.local_port = addr, port
        self.bound[(addr, port)] = ep

    def _ephemeral(self, addr: int) -> int:
        span = EPHEMERAL_HIGH - EPHEMERAL_LOW + 1
        for _ in range(span):
            port = self._next_port
            self._next_port = EPHEMERAL_LOW + (port - EPHEMERAL_LOW + 1) % span
            if (addr, port) not in self.bound and (0, port) not in self.bound:
                return port
        raise OSError(errno.EADDRINUSE, "No ephemeral UDP port free")

    def connect(self, ep: UdpEndpoint, dst: int, dport: int) -> None:
        if not ep.bound:
            self.bind(ep, 0, 0)
        if ep.remote is not None:
            self.connected.pop((self._laddr(ep), ep.local_port) + ep.remote, None)
        ep.remote = (dst, dport)
        self.connected[(self._laddr(ep), ep.local_port, dst, dport)] = ep

    def _laddr(self, ep: UdpEndpoint) -> int:
        return ep.local_addr or self.stack.iface.addr

    def unbind(self, ep: UdpEndpoint) -> None:
        if ep.bound and self.bound.get((ep.local_addr, ep.local_port)) is ep:
            del self.bound[(ep.local_addr, ep.local_port)]
        if ep.remote is not None:
            self.connected.pop((self._laddr(ep), ep.local_port) + ep.remote, None)

    # -- input ------------------------------------------------------------------
    def input(self, frame: memoryview, rec: tuple, now: float) -> None:
        _, _, l3, ihl, tot, _, src, dst, l4, sport, dport, poff, plen, _ = rec
        stack = self.stack
        iface = stack.iface
        if not iface.is_local_dest(dst):
            stack.stats.drop("ipv4.not_for_us")
            return
        ep = self.connected.get((iface.addr, dport, src, sport))
        if ep is None:
            ep = self.bound.get((dst, dport)) or self.bound.get((0, dport))
            if ep is None and dst != iface.addr:
                ep = self.bound.get((iface.addr, dport))
            if ep is not None and ep.remote is not None and ep.remote != (src, sport):
                ep = None  # a connected socket only hears its peer
        if ep is None:
            stack.stats.drop("udp.no_socket")
            if dst == iface.addr:
                # RFC 1122 4.1.3.1: port unreachable (rate-limited, never for broadcasts)
                stack.icmp.send_error(3, 3, frame[l3:l3 + tot], src)
            return
        ep.deliver(bytes(frame[poff:poff + plen]), src, sport)

    def icmp_error(self, laddr: int, lport: int, raddr: int, rport: int, err: OSError) -> bool:
        ep = self.connected.get((laddr, lport, raddr, rport))
        if ep is None:
            return False
        ep.error = err
        if ep.on_readable is not None:
            ep.on_readable()
        return True

    # -- output -----------------------------------------------------------------
    def send(self, ep: UdpEndpoint, payload, dst: int, dport: int, now: float) -> int:
        stack = self.stack
        iface = stack.iface
        if not 0 < dport <= 0xFFFF:
            raise OSError(errno.EINVAL, "Invalid argument (destination port)")
        if (iface.is_broadcast(dst) or dst == LIMITED_BROADCAST) and not ep.broadcast:
            raise PermissionError(errno.EACCES, "Permission denied (broadcast needs SO_BROADCAST)")
        if not ep.bound:
            self.bind(ep, 0, 0)
        n = len(payload)
        if n > 65507:
            raise OSError(errno.EMSGSIZE, "Message too long")
        src = ep.local_addr if ep.local_addr and not iface.is_broadcast(ep.local_addr) else iface.addr
        if 28 + n <= iface.mtu and not iface.is_broadcast(dst):
            mac = stack.arp.lookup(iface.next_hop(dst), now)
            if mac is not None:
                key = (mac, src, dst, ep.local_port, dport)
                tmpl = self._templates.get(key)
                if tmpl is None:
                    if len(self._templates) >= 4096:
                        self._templates.clear()
                    iptmpl = stack.ipv4.template(mac, src, dst, PROTO_UDP, stack.ipv4.ttl)
                    tmpl = iptmpl + ep.local_port.to_bytes(2, "big") + dport.to_bytes(2, "big") + bytes(4)
                    self._templates[key] = tmpl
                slot = stack.tx_slot()
                if slot is None:
                    raise BlockingIOError(errno.ENOBUFS, "No buffer space available (TX ring full)")
                stack.tx_done(_fastpath.emit_udp(slot, tmpl, stack.ipv4.next_ident(), payload))
                stack.stats.inc("udp.datagrams_sent")
                stack.stats.inc("ipv4.packets_sent")
                return n
        # Slow path: first packet to a host (ARP), broadcast, or needs fragmentation.
        ulen = 8 + n
        dgram = bytearray(ulen)
        dgram[0:2] = ep.local_port.to_bytes(2, "big")
        dgram[2:4] = dport.to_bytes(2, "big")
        dgram[4:6] = ulen.to_bytes(2, "big")
        dgram[8:] = payload
        s = _fastpath.ones_sum(src.to_bytes(4, "big") + dst.to_bytes(4, "big") + bytes((0, PROTO_UDP)) + ulen.to_bytes(2, "big"))
        c = _fastpath.checksum(dgram, s) or 0xFFFF
        dgram[6:8] = c.to_bytes(2, "big")
        stack.ipv4.output(dst, PROTO_UDP, dgram, src=src, now=now)
        stack.stats.inc("udp.datagrams_sent")
        return n
