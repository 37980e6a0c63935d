"""Fragment reassembly (IPv4: RFC 791 section 3.2, RFC 815; IPv6: RFC 8200 4.5), bounded and overlap-safe.

One Reassembler per IP version; ``prefix`` names its counters (``ipv4.frag_overlap``,
``ipv6.frag_overlap``...) and ``max_payload`` bounds a reassembled payload.

A datagram is keyed by (src, dst, protocol, identification). Policies:

- Overlap: a fragment that overlaps data already held with different
  extents discards the whole datagram (``ipv4.frag_overlap``), as Linux does
  since the FragmentSmack fixes and as RFC 5722 requires for IPv6; overlaps
  are how reassembly attacks smuggle data. An exact duplicate of a fragment
  already held is ignored (``ipv4.frag_duplicate``).
- Bounds, as Linux's ipfrag: a budget, and eviction rather than refusal.
  At most ``max_datagrams`` in progress and ``max_bytes`` held, each
  fragment charged its data plus ``FRAGMENT_OVERHEAD`` bytes of bookkeeping
  (so tiny fragments cost what they really cost). A new datagram that finds
  the table full, or a fragment that finds the bytes used up, evicts the
  oldest datagrams in progress first (``ipv4.frag_evicted``). One source
  holds at most ``max_per_source`` datagrams: its next new one evicts that
  source's least recently fed datagram (``ipv4.frag_source_evicted``), never
  the newcomer, so a flood of lone first fragments spoofed from a real
  client's address cannot lock out the client's next real datagram. And,
  as ``ipfrag_max_dist`` (Linux, default 64): every fragment from a source
  advances that source's count; a datagram of that source that has not
  been fed during its last ``max_dist`` fragments is stale and flushed
  (``ipv4.frag_stale``): fragments the sender abandoned or an attacker
  planted go as soon as the source moves on, not after the timeout. A
  fragment that still does not fit is dropped (``ipv4.frag_memory``).
- Cost: the fragment's place is found by bisection and completeness is
  known from the bytes held (overlaps are refused, so the pieces tile
  [0, total) exactly when they add up to it): adding a fragment is not a
  walk over the ones already held.
  A datagram longer than 65,535 bytes is dropped (``ipv4.frag_too_long``);
  a non-final fragment whose length is not a multiple of 8 is malformed
  (``ipv4.frag_bad_length``).
- Timeout: ``timeout`` seconds after its first fragment, an incomplete
  datagram is discarded (``ipv4.frag_timeout``); the caller may then send
  ICMP time exceeded (code 1) if fragment zero had arrived (RFC 792, RFC 1122
  section 3.3.2).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable, Optional

FRAGMENT_OVERHEAD = 256  # bytes charged per fragment held beyond its data (an skb's bookkeeping, roughly)


class _Source:
    """One source address's datagrams in progress, least recently fed first, and its fragment count."""

    __slots__ = ("queues", "count")

    def __init__(self):
        self.queues: dict[tuple, None] = {}  # keys, in the order their datagrams last got a fragment
        self.count = 0  # fragments from this source so far (Linux: inet_peer's rid)


class _Datagram:
    __slots__ = ("pieces", "offsets", "total", "held", "data_bytes", "first_header", "timer", "expires", "fed_at")

    def __init__(self):
        self.pieces: list[tuple[int, bytes]] = []  # sorted by offset
        self.offsets: list[int] = []  # the pieces' offsets, for bisection
        self.data_bytes = 0
        self.total: Optional[int] = None  # payload length, known once the last fragment arrives
        self.held = 0
        self.first_header: Optional[bytes] = None  # IP header of fragment zero (for ICMP)
        self.timer = None
        self.expires = 0.0
        self.fed_at = 0  # the source's fragment count at this datagram's last fragment


class Reassembler:
    def __init__(self, timers, stats, *, timeout: float = 30.0, max_bytes: int = 4 << 20, max_datagrams: int = 64,
                 max_per_source: int = 16, on_timeout: Optional[Callable[[bytes, bytes, float], None]] = None,
                 prefix: str = "ipv4", max_payload: int = 65535 - 20, max_dist: int = 64):
        self.prefix = prefix  # of the counters: "ipv4" or "ipv6"
        self.max_payload = max_payload  # the longest reassembled payload
        self.completed_header: Optional[bytes] = None  # fragment zero's header of the datagram add() completed
        self.timers = timers
        self.stats = stats
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.max_datagrams = max_datagrams
        self.max_per_source = max_per_source
        self.max_dist = max_dist  # 0: no staleness rule
        self.sources: dict[bytes, _Source] = {}  # by source address (key[0]); only sources with datagrams
        self.on_timeout = on_timeout  # (fragment zero's IP header, its first 8 data bytes, now) -> None
        self.datagrams: dict[tuple, _Datagram] = {}
        self.held = 0

    def _discard(self, key: tuple) -> None:
        dg = self.datagrams.pop(key, None)
        if dg is not None:
            self.held -= dg.held
            source = self.sources.get(key[0])
            if source is not None:
                source.queues.pop(key, None)
                if not source.queues:
                    del self.sources[key[0]]
            if dg.timer is not None:
                dg.timer.cancel()

    def _evict_oldest(self, keep: tuple) -> bool:
        """Discard the oldest datagram in progress other than ``keep``; False when there is none."""
        for key in self.datagrams:  # insertion order: oldest first
            if key != keep:
                self._discard(key)
                self.stats.drop(self.prefix + ".frag_evicted")
                return True
        return False

    def _flush_stale(self, source: _Source) -> None:
        """ipfrag_max_dist: flush the source's datagrams not fed during its last ``max_dist`` fragments."""
        queues, datagrams = source.queues, self.datagrams
        while queues:
            oldest = next(iter(queues))
            if source.count - datagrams[oldest].fed_at <= self.max_dist:
                return
            self._discard(oldest)
            self.stats.drop(self.prefix + ".frag_stale")

    def _expire(self, key: tuple, now: float) -> None:
        dg = self.datagrams.get(key)
        if dg is None:
            return
        self.stats.drop(self.prefix + ".frag_timeout")
        first = dg.pieces[0] if dg.pieces and dg.pieces[0][0] == 0 else None
        header = dg.first_header
        self._discard(key)
        if first is not None and header is not None and self.on_timeout is not None:
            self.on_timeout(header, first[1][:8], now)

    def add(self, key: tuple, offset: int, data, more: bool, header, now: float) -> Optional[bytes]:
        """Add one fragment's payload; returns the whole payload when complete, else None."""
        stats = self.stats
        length = len(data)
        end = offset + length
        if more and length % 8:
            stats.drop(self.prefix + ".frag_bad_length")
            return None
        if end > self.max_payload:
            stats.drop(self.prefix + ".frag_too_long")
            self._discard(key)
            return None
        if more and length == 0:
            stats.drop(self.prefix + ".frag_bad_length")
            return None
        cost = length + FRAGMENT_OVERHEAD
        source = self.sources.get(key[0])
        if source is None:
            source = _Source()
        source.count += 1
        if self.max_dist:
            self._flush_stale(source)
        self.sources[key[0]] = source  # (again, if the flush emptied it)
        dg = self.datagrams.get(key)
        if dg is None:
            while len(source.queues) >= self.max_per_source:
                self._discard(next(iter(source.queues)))  # the source's least recently fed
                stats.drop(self.prefix + ".frag_source_evicted")
                self.sources[key[0]] = source  # (again, if that was its last)
            while len(self.datagrams) >= self.max_datagrams:
                if not self._evict_oldest(key):
                    stats.drop(self.prefix + ".frag_memory")
                    if not source.queues:
                        self.sources.pop(key[0], None)
                    return None
                self.sources[key[0]] = source
            dg = self.datagrams[key] = _Datagram()
            dg.timer = self.timers.timer(lambda t, key=key: self._expire(key, t))
            dg.timer.arm(now + self.timeout)
        else:
            del source.queues[key]  # to the end: the most recently fed
        source.queues[key] = None
        dg.fed_at = source.count
        while self.held + cost > self.max_bytes:
            if not self._evict_oldest(key):
                stats.drop(self.prefix + ".frag_memory")
                self._discard(key)
                return None
        # The last fragment fixes the total; contradictions are malformed.
        if not more:
            if dg.total is not None and dg.total != end:
                stats.drop(self.prefix + ".frag_overlap")
                self._discard(key)
                return None
            dg.total = end
        if dg.total is not None and end > dg.total:
            stats.drop(self.prefix + ".frag_overlap")
            self._discard(key)
            return None
        pieces = dg.pieces
        # Find the insertion point (bisection) and check both neighbours for overlap.
        i = bisect_left(dg.offsets, offset)
        if i < len(pieces) and pieces[i][0] == offset and len(pieces[i][1]) == length:
            if pieces[i][1] == bytes(data):
                stats.inc(self.prefix + ".frag_duplicate")
                return None
            stats.drop(self.prefix + ".frag_overlap")
            self._discard(key)
            return None
        if (i > 0 and pieces[i - 1][0] + len(pieces[i - 1][1]) > offset) or (i < len(pieces) and end > pieces[i][0]):
            stats.drop(self.prefix + ".frag_overlap")
            self._discard(key)
            return None
        pieces.insert(i, (offset, bytes(data)))
        dg.offsets.insert(i, offset)
        dg.data_bytes += length
        dg.held += cost
        self.held += cost
        if offset == 0:
            dg.first_header = bytes(header)
        stats.inc(self.prefix + ".fragments_received")
        if dg.total is None:
            return None
        # No overlaps were let in and every piece lies inside [0, total): the pieces tile it
        # exactly when their lengths add up to it.
        if dg.data_bytes != dg.total:
            return None
        self.completed_header = dg.first_header
        self._discard(key)
        stats.inc(self.prefix + ".reassembled")
        return b"".join(piece for _, piece in pieces)
