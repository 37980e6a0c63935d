"""ARP (RFC 826): the neighbour cache, request/reply, and packets waiting for resolution.

- Cache entries are fresh for ``ttl`` seconds (reachable time). An entry
  past its ttl is stale for ``max_retries * retry_interval`` more seconds:
  it is still used, and each lookup polls the neighbour with a unicast ARP
  request at most once per ``retry_interval`` (RFC 1122 2.3.2.1 "unicast
  poll", Linux's STALE/PROBE states; ``arp.unicast_polls_sent``); its reply
  refreshes the entry. A neighbour we are talking to is so revalidated
  without a pending slot or the broadcast budget, which a flood from
  spoofed sources may hold. A timer purges entries whose stale time is over
  (armed only while the cache holds any, so an idle stack has no deadline);
  a later lookup resolves again from scratch.
- The cache holds at most ``max_entries`` (default 1024, Linux's
  gc_thresh3). Learning a new neighbour at the cap counts ``arp.cache_full``
  and evicts an expired entry if there is one, else the oldest (entries are
  kept in order of their last update, which with one ``ttl`` is also the
  order in which they expire: both are the front of the dict).
- Only on-link unicast senders are learned or answered (a hostile network
  must not fill the cache from far away): a sender address off our subnet
  (``arp.sender_off_link``), the subnet's network or broadcast address
  (``arp.sender_not_unicast``), or a broadcast/multicast sender MAC
  (``arp.sender_bad_mac``) is dropped. An RFC 5227 probe (sender 0.0.0.0)
  for our address is answered, never learned.
- A packet to an unresolved next hop is queued (bounded per next hop and in
  total; overflow is the drop ``arp.queue_full``) and an ARP request is sent,
  retried every ``retry_interval`` up to ``max_retries`` times; then the queue
  is dropped (``arp.unresolved``) and the failure counted
  (``arp.resolution_failures``). The limits are checked before anything is
  created: at most ``max_pending`` next hops (default 64) are being resolved
  at once (``arp.pending_full``), and requests leave through a token bucket
  (``request_rate`` per second, burst ``request_burst``; defaults 50 and 50)
  so spoofed sources cannot turn a SYN flood into a broadcast storm
  (``arp.requests_rate_limited``: that try is skipped, the retry timer runs on).
- Requests for our address are answered; the sender of any ARP packet
  addressed to us (or of one for an address we already cache) is learned
  (RFC 826 "merge" rule).
- ``announce()`` sends a gratuitous ARP (RFC 5227 section 3) at start.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Optional

from ustack import _fastpath
from ustack.net.addr import ANY4, to_str
from ustack.net.link import BROADCAST_MAC, Link
from ustack.net.route import Interface
from ustack.ratelimit import TokenBucket
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
        max_entries: int = 1024,
        max_pending: int = 64,
        request_rate: float = 50.0,
        request_burst: float = 50.0,
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
        self.max_entries = max_entries
        self.max_pending = max_pending
        # ip -> (mac, expires_at), in order of last update: the front is the oldest and the first to expire
        self.cache: dict[bytes, tuple[bytes, float]] = {}
        self.stale_time = max_retries * retry_interval  # how long past its ttl an entry is used while polled
        self._polled: dict[bytes, float] = {}  # stale entries: when the last unicast poll went out
        self.pending: dict[bytes, _Pending] = {}
        self.queued = 0
        self._requests = TokenBucket(request_rate, request_burst)
        self._purge_timer = timers.timer(self._purge_due)
        # Bumped when a neighbour is learned or evicted: cached frame templates copied its MAC (_fp_tmpl.pxi).
        self.gen = _fastpath.Generation()

    # -- lookups ------------------------------------------------------------
    def lookup(self, ip: bytes, now: float) -> Optional[bytes]:
        entry = self.cache.get(ip)
        if entry is None:
            return None
        mac, expires = entry
        if expires > now:
            return mac
        if now < expires + self.stale_time:
            self._poll(ip, mac, now)  # stale: still used while the neighbour is asked again
            return mac
        del self.cache[ip]
        self.gen.bump()
        self._polled.pop(ip, None)
        self.stats.inc("arp.expired")
        return None

    def _poll(self, ip: bytes, mac: bytes, now: float) -> None:
        """RFC 1122 2.3.2.1: a unicast ARP request to a stale entry's neighbour, once per retry_interval."""
        last = self._polled.get(ip)
        if last is not None and now - last < self.retry_interval:
            return
        self._polled[ip] = now
        iface = self.iface
        self._send(mac, ArpPacket.request(iface.mac, iface.addr, ip))
        self.stats.inc("arp.unicast_polls_sent")

    def learn(self, ip: bytes, mac: bytes, now: float) -> None:
        if mac == BROADCAST_MAC or mac[0] & 1 or ip == ANY4:
            return  # never cache broadcast/multicast hardware addresses
        cache = self.cache
        self._polled.pop(ip, None)
        if cache.pop(ip, None) is None and len(cache) >= self.max_entries:
            self.stats.inc("arp.cache_full")
            self._purge(now, stale_too=True)
            if len(cache) >= self.max_entries:
                del cache[next(iter(cache))]  # the oldest
                self.gen.bump()
                self.stats.inc("arp.evicted")
        cache[ip] = (bytes(mac), now + self.ttl)
        self.gen.bump()
        if self._purge_timer.deadline is None:
            self._purge_timer.arm(next(iter(cache.values()))[1] + self.stale_time)
        pending = self.pending.pop(ip, None)
        if pending is not None:
            if pending.timer is not None:
                pending.timer.cancel()
            self.queued -= len(pending.packets)
            for send in pending.packets:
                send(mac)

    def entries(self, now: float) -> list[tuple[str, str, float]]:
        """(ip, mac, seconds left) of the live entries, oldest first (no sort, no scan beyond the list)."""
        self._purge(now)
        return [(to_str(ip), mac.hex(":"), exp - now) for ip, (mac, exp) in self.cache.items()]

    def _purge(self, now: float, stale_too: bool = False) -> None:
        """Drop the entries whose stale time is over (``stale_too``: every expired one, for the cap).

        They are at the front: entries are in last-update order with one ttl.
        """
        cache = self.cache
        limit = now if stale_too else now - self.stale_time
        n = 0
        while cache:
            ip = next(iter(cache))
            if cache[ip][1] > limit:
                break
            del cache[ip]
            self.gen.bump()
            self._polled.pop(ip, None)
            n += 1
        if n:
            self.stats.inc("arp.expired", n)

    def _purge_due(self, now: float) -> None:
        self._purge(now)
        cache = self.cache
        if cache:
            self._purge_timer.arm(max(now, next(iter(cache.values()))[1] + self.stale_time))

    # -- resolution ----------------------------------------------------------
    def resolve_then(self, ip: bytes, send: Callable[[bytes], None], now: float) -> None:
        """Call ``send(mac)`` once ``ip`` is resolved; queue it meanwhile (bounded)."""
        stats = self.stats
        pending = self.pending.get(ip)
        # The limits first: nothing (entry, timer, broadcast) is created for a packet we would drop.
        if self.queued >= self.queue_total or (pending is not None and len(pending.packets) >= self.queue_per_host):
            stats.drop("arp.queue_full")
            return
        if pending is None:
            if len(self.pending) >= self.max_pending:
                stats.drop("arp.pending_full")
                return
            pending = self.pending[ip] = _Pending()
            pending.timer = self.timers.timer(lambda t, ip=ip: self._retry(ip, t))
            self._request(ip, now)
            pending.timer.arm(now + self.retry_interval)
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
        self._request(ip, now)
        pending.timer.arm(now + self.retry_interval)

    def _request(self, ip: bytes, now: float) -> None:
        if not self._requests.take(now):
            self.stats.inc("arp.requests_rate_limited")
            return
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
        sha = pkt.sha
        if spa == iface.addr and sha != iface.mac:
            stats.inc("arp.address_conflict")  # someone else claims our address (RFC 5227)
            stats.drop("arp.conflict")
            return
        if sha[0] & 1:  # broadcast or multicast sender hardware address: never an answerable neighbour
            stats.drop("arp.sender_bad_mac")
            return
        if spa == ANY4:
            # RFC 5227 section 2.1.1: a probe. Answer one for our address (defend it), learn nothing.
            if tpa == iface.addr and pkt.operation == OP_REQUEST:
                stats.inc("arp.probes_received")
                self._send(sha, pkt.reply_to(iface.mac))
                stats.inc("arp.replies_sent")
            else:
                stats.drop("arp.probe_not_for_us")
            return
        if not iface.prefix.contains(spa):
            stats.drop("arp.sender_off_link")
            return
        if iface.prefixlen < 31 and (spa == iface.broadcast or spa == iface.prefix.network):
            stats.drop("arp.sender_not_unicast")
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
