"""Wire formats: one module per header, frozen slotted Repr classes with parse()/emit().

The slow path and the tests use these; the fast path (``ustack._fastpath``)
is checked against them. Every parse error is a ``WireError`` carrying a
dotted drop reason (``ipv4.truncated``, ``udp.bad_checksum``...).
"""

from __future__ import annotations


class WireError(ValueError):
    """Malformed bytes. ``reason`` is the named drop reason, e.g. ``ipv4.bad_ihl``."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
