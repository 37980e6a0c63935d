"""Source fragmentation shared by IPv4 and IPv6: the payload cut into TX slots.

RFC 791 section 3.2 and RFC 8200 section 4.5 cut the same way: every
fragment but the last carries a multiple of 8 octets of data (the offset
field counts 8-octet units), as much as the MTU leaves after the headers.
What differs, the headers each fragment carries, is the caller's
``emit_piece(slot, offset, piece, more) -> frame length``.
"""

from __future__ import annotations

from typing import Callable

from ustack.net.link import Link
from ustack.stats import Stats


def piece_size(mtu: int, headers: int) -> int:
    """The data per fragment: what ``mtu`` leaves after ``headers`` bytes, rounded down to 8."""
    return (mtu - headers) & ~7


def fragment(link: Link, payload, chunk: int, emit_piece: Callable[[memoryview, int, memoryview, bool], int],
             stats: Stats, counter: str) -> bool:
    """Write ``payload`` as fragments of ``chunk`` bytes into TX slots, counting each under ``counter``.
    False when the TX ring ran out part way (the rest is lost, as a full ring loses any frame)."""
    view = memoryview(payload)
    n = len(view)
    off = 0
    while off < n:
        slot = link.slot()
        if slot is None:
            return False
        link.sent(emit_piece(slot, off, view[off:off + chunk], off + chunk < n))
        stats.inc(counter)
        off += chunk
    return True
