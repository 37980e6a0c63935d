"""IPv4 fragment reassembly (RFC 791 section 3.2, RFC 815), bounded and overlap-safe.

A datagram is keyed by (src, dst, protocol, identification). Policies:

- Overlap: a fragment that overlaps data already held with different
  extents discards the whole datagram (``ipv4.frag_overlap``), as Linux does
  since the FragmentSmack fixes and as RFC 5722 requires for IPv6; overlaps
  are how reassembly attacks smuggle data. An exact duplicate of a fragment
  already held is ignored (``ipv4.frag_duplicate``).
- Bounds: at most ``max_datagrams`` in progress and ``max_bytes`` buffered;
  a fragment that would exceed either is dropped (``ipv4.frag_memory``).
  A datagram longer than 65,535 bytes is dropped (``ipv4.frag_too_long``);
  a non-final fragment whose length is not a multiple of 8 is malformed
  (``ipv4.frag_bad_length``).
- Timeout: ``timeout`` seconds after its first fragment, an incomplete
  datagram is discarded (``ipv4.frag_timeout``); the caller may then send
  ICMP time exceeded (code 1) if fragment zero had arrived (RFC 792, RFC 1122
  section 3.3.2).
"""

from __future__ import annotations

from typing import Callable, Optional


class _Datagram:
    __slots__ = ("pieces", "total", "held", "first_header", "timer", "expires")

    def __init__(self):
        self.pieces: list[tuple[int, bytes]] = []  # sorted by offset
        self.total: Optional[int] = None  # payload length, known once the last fragment arrives
        self.held = 0
        self.first_header: Optional[bytes] = None  # IP header of fragment zero (for ICMP)
        self.timer = None
        self.expires = 0.0


class Reassembler:
    def __init__(self, timers, stats, *, timeout: float = 30.0, max_bytes: int = 4 << 20, max_datagrams: int = 64,
                 on_timeout: Optional[Callable[[bytes, bytes, float], None]] = None):
        self.timers = timers
        self.stats = stats
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.max_datagrams = max_datagrams
        self.on_timeout = on_timeout  # (fragment zero's IP header, its first 8 data bytes, now) -> None
        self.datagrams: dict[tuple, _Datagram] = {}
        self.held = 0

    def _discard(self, key: tuple) -> None:
        dg = self.datagrams.pop(key, None)
        if dg is not None:
            self.held -= dg.held
            if dg.timer is not None:
                dg.timer.cancel()

    def _expire(self, key: tuple, now: float) -> None:
        dg = self.datagrams.get(key)
        if dg is None:
            return
        self.stats.drop("ipv4.frag_timeout")
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
            stats.drop("ipv4.frag_bad_length")
            return None
        if end > 65535 - 20:
            stats.drop("ipv4.frag_too_long")
            self._discard(key)
            return None
        if more and length == 0:
            stats.drop("ipv4.frag_bad_length")
            return None
        dg = self.datagrams.get(key)
        if dg is None:
            if len(self.datagrams) >= self.max_datagrams:
                stats.drop("ipv4.frag_memory")
                return None
            dg = self.datagrams[key] = _Datagram()
            dg.timer = self.timers.timer(lambda t, key=key: self._expire(key, t))
            dg.timer.arm(now + self.timeout)
        if self.held + length > self.max_bytes:
            stats.drop("ipv4.frag_memory")
            self._discard(key)
            return None
        # The last fragment fixes the total; contradictions are malformed.
        if not more:
            if dg.total is not None and dg.total != end:
                stats.drop("ipv4.frag_overlap")
                self._discard(key)
                return None
            dg.total = end
        if dg.total is not None and end > dg.total:
            stats.drop("ipv4.frag_overlap")
            self._discard(key)
            return None
        pieces = dg.pieces
        # Find the insertion point and check both neighbours for overlap.
        i = 0
        while i < len(pieces) and pieces[i][0] < offset:
            i += 1
        if i < len(pieces) and pieces[i][0] == offset and len(pieces[i][1]) == length:
            if pieces[i][1] == bytes(data):
                stats.inc("ipv4.frag_duplicate")
                return None
            stats.drop("ipv4.frag_overlap")
            self._discard(key)
            return None
        if (i > 0 and pieces[i - 1][0] + len(pieces[i - 1][1]) > offset) or (i < len(pieces) and end > pieces[i][0]):
            stats.drop("ipv4.frag_overlap")
            self._discard(key)
            return None
        pieces.insert(i, (offset, bytes(data)))
        dg.held += length
        self.held += length
        if offset == 0:
            dg.first_header = bytes(header)
        stats.inc("ipv4.fragments_received")
        if dg.total is None:
            return None
        # Complete when the pieces tile [0, total) without holes.
        pos = 0
        for off, piece in pieces:
            if off != pos:
                return None
            pos += len(piece)
        if pos != dg.total:
            return None
        self._discard(key)
        stats.inc("ipv4.reassembled")
        return b"".join(piece for _, piece in pieces)
