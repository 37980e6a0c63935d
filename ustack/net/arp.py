"""ARP (RFC 826): the neighbour cache, request/reply, and packets waiting for resolution.

- Cache entries expire after ``ttl`` seconds (reachable time); a lookup of
  an expired entry re-resolves.
- A packet to an unresolved next hop is queued (bounded per next hop and in
  total; overflow is the drop ``arp.queue_full``) and an ARP request is sent,
  retried every ``retry_interval`` up to ``max_retries`` times; then the queue
  is dropped (``arp.unresolved``) and the failure counted (``arp.resolution_failures``).
- Requests for our address are answered; the sender of any ARP packet
  addressed to us (or a gratuitous one for an address we already cache) is
  learned (RFC 826 "merge" rule).
- ``announce()`` sends a gratuitous ARP (RFC 5227 section 3) at start.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Optional

from ustack.net.addr import ANY4, to_str
from ustack.net.link import BROADCAST_MAC, Link
from ustack.net.route import Interface
from ustack.stats import Stats
from ustack.timers import TimerHeap
from ustack.wire import WireError
from ustack.wire.arp import OP_REPLY, OP_REQUEST, ArpPacket

ETHERTYPE_ARP = 0x0806


class _Pending:
    __slots__ = ("packets", "retries", "timer")

    def __init__(self):
        self.packets: deque = deque()
        self.retries = 0
        self.timer = None


class ArpLayer:
    """The neighbour cache of one IPv4 interface; sends through ``link``, times through ``timers``."""

    def __init__(
        self,
        link: Link,
        iface: Interface,
        timers: TimerHeap,
        stats: Stats,
        *,
        ttl: float = 60.0,
        retry_interval: float = 1.0,
        max_retries: int = 3,
        queue_per_host: int = 16,
        queue_total: int = 256,
    ):
        self.link = link
        self.iface = iface
        self.timers = timers
        self.stats = stats
        self.ttl = ttl
        self.retry_interval = retry_interval
        self.max_retries = max_retries
        self.queue_per_host = queue_per_host
        self.queue_total = queue_total
        self.cache: dict[bytes, tuple[bytes, float]] = {}  # ip -> (mac, expires_at)
        self.pending: dict[bytes, _Pending] = {}
        self.queued = 0

    # -- lookups ------------------------------------------------------------
    def lookup(self, ip: bytes, now: float) -> Optional[bytes]:
        entry = self.cache.get(ip)
        if entry is None:
            return None
        if entry[1] <= now:
            del self.cache[ip]
            self.stats.inc("arp.expired")
            return None
        return entry[0]

    def learn(self, ip: bytes, mac: bytes, now: float) -> None:
        if mac == BROADCAST_MAC or mac[0] & 1 or ip == ANY4:
            return  # never cache broadcast/multicast hardware addresses
        self.cache[ip] = (mac, now + self.ttl)
        pending = self.pending.pop(ip, None)
        if pending is not None:
            if pending.timer is not None:
                pending.timer.cancel()
            self.queued -= len(pending.packets)
            for send in pending.packets:
                send(mac)

    def entries(self, now: float) -> list[tuple[str, str, float]]:
        return [(to_str(ip), mac.hex(":"), exp - now) for ip, (mac, exp) in sorted(self.cache.items()) if exp > now]

    # -- resolution ----------------------------------------------------------
    def resolve_then(self, ip: bytes, send: Callable[[bytes], None], now: float) -> None:
        """Call ``send(mac)`` once ``ip`` is resolved; queue it meanwhile (bounded)."""
        stats = self.stats
        pending = self.pending.get(ip)
        if pending is None:
            pending = self.pending[ip] = _Pending()
            pending.timer = self.timers.timer(lambda t, ip=ip: self._retry(ip, t))
            self._request(ip)
            pending.timer.arm(now + self.retry_interval)
        if len(pending.packets) >= self.queue_per_host or self.queued >= self.queue_total:
            stats.drop("arp.queue_full")
            return
        pending.packets.append(send)
        self.queued += 1

    def _retry(self, ip: bytes, now: float) -> None:
        pending = self.pending.get(ip)
        if pending is None:
            return
        pending.retries += 1
        if pending.retries > self.max_retries:
            del self.pending[ip]
            self.queued -= len(pending.packets)
            self.stats.drop("arp.unresolved", len(pending.packets) or 1)
            self.stats.inc("arp.resolution_failures")
            return
        self._request(ip)
        pending.timer.arm(now + self.retry_interval)

    def _request(self, ip: bytes) -> None:
        iface = self.iface
        self._send(BROADCAST_MAC, ArpPacket.request(iface.mac, iface.addr, ip))
        self.stats.inc("arp.requests_sent")

    def announce(self) -> None:
        """Gratuitous ARP for our address (RFC 5227 section 3)."""
        iface = self.iface
        self._send(BROADCAST_MAC, ArpPacket.announcement(iface.mac, iface.addr))
        self.stats.inc("arp.announcements_sent")

    def _send(self, dst_mac: bytes, pkt: ArpPacket) -> None:
        body = bytearray(pkt.header_len)
        pkt.emit(body, 0)
        self.link.send_frame(dst_mac, ETHERTYPE_ARP, body)

    # -- input ---------------------------------------------------------------
    def input(self, frame: memoryview, l3: int, now: float) -> None:
        stats = self.stats
        try:
            pkt = ArpPacket.parse(frame[l3:])
        except WireError as e:
            stats.drop(e.reason)
            return
        iface = self.iface
        spa = bytes(pkt.spa)
        tpa = bytes(pkt.tpa)
        if spa == iface.addr and pkt.sha != iface.mac:
            stats.inc("arp.address_conflict")  # someone else claims our address (RFC 5227)
            stats.drop("arp.conflict")
            return
        # RFC 826 merge rule: update an existing entry for the sender.
        merged = False
        if spa in self.cache or spa in self.pending:
            self.learn(spa, pkt.sha, now)
            merged = True
        if tpa != iface.addr:
            if not merged:
                stats.drop("arp.not_for_us")
            return
        if not merged:
            self.learn(spa, pkt.sha, now)
        if pkt.operation == OP_REQUEST:
            stats.inc("arp.requests_received")
            self._send(pkt.sha, pkt.reply_to(iface.mac))
            stats.inc("arp.replies_sent")
        elif pkt.operation == OP_REPLY:
            stats.inc("arp.replies_received")
