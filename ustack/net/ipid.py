"""IPv4 Identification values per destination (RFC 6864, RFC 7739 section 5.4).

One global counter lets anyone who talks to the host count the datagrams it
sends to everybody else (idle scans, off-path traffic measurement, RFC 7739
section 4). Instead, as RFC 7739 section 5.4 suggests and as Linux's
``ip_idents`` does, the IDs come from a fixed table of counters: a
(source, destination, protocol) picks its bucket with a keyed hash
(BLAKE2s, the stack's secret), and each bucket starts at a value drawn from
the same keyed hash. A destination sees its own IDs increase by one
(what reassembly needs, RFC 6864 section 4.1: unique within the flow for a
maximum datagram lifetime); how many datagrams went elsewhere stays hidden,
and IDs of other destinations cannot be predicted without the secret.

The table is fixed (``buckets`` counters, 2048 by default) so remote
traffic cannot grow it; a bounded cache keeps the bucket of recent keys so
the hash is computed once per flow, not once per datagram.
"""

from __future__ import annotations

import hashlib

DEFAULT_BUCKETS = 2048
MAX_CACHED = 4096  # (src, dst, proto) -> bucket entries kept; cleared wholesale when full


class IpIdents:
    """The per-destination IP ID generator of one IPv4 layer."""

    __slots__ = ("counters", "_hash", "_cache", "_mask")

    def __init__(self, secret: bytes, buckets: int = DEFAULT_BUCKETS):
        if buckets <= 0 or buckets & (buckets - 1):
            raise ValueError(f"buckets must be a power of two, not {buckets}")
        if len(secret) < 16:
            raise ValueError("the IP ID secret must be at least 16 bytes")
        key = bytes(secret) if len(secret) <= 32 else hashlib.blake2s(bytes(secret)).digest()
        self._hash = hashlib.blake2s(key=key, digest_size=8, person=b"ipident")
        self._mask = buckets - 1
        # Each bucket's first ID: 16 random-looking bits from the keyed hash (RFC 7739 5.4's "random start").
        seed = self._hash.copy()
        seed.update(b"start")
        stream = hashlib.blake2s(seed.digest(), digest_size=32).digest()
        starts = bytearray()
        block = 0
        while len(starts) < 2 * buckets:
            h = hashlib.blake2s(stream + block.to_bytes(4, "big"), digest_size=32)
            starts += h.digest()
            block += 1
        self.counters = [int.from_bytes(starts[2 * i:2 * i + 2], "big") for i in range(buckets)]
        self._cache: dict[tuple, int] = {}

    def bucket(self, src: bytes, dst: bytes, proto: int) -> int:
        """The counter index of (src, dst, proto): F(src, dst, proto, secret) mod buckets."""
        key = (src, dst, proto)
        index = self._cache.get(key)
        if index is None:
            h = self._hash.copy()
            h.update(bytes(src) + bytes(dst) + bytes((proto & 0xFF,)))
            index = int.from_bytes(h.digest(), "big") & self._mask
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[key] = index
        return index

    def next(self, src: bytes, dst: bytes, proto: int) -> int:
        """The Identification for the next datagram from ``src`` to ``dst`` carrying ``proto``."""
        index = self.bucket(src, dst, proto)
        counters = self.counters
        ident = (counters[index] + 1) & 0xFFFF
        counters[index] = ident
        return ident
