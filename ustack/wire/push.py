"""Is a received TCP segment in the middle of its sender's write (data, PSH clear)?

RFC 9293 3.9.1.2 (after RFC 1122 4.2.2.2): a sender sets PSH on the last
segment of the data an application write handed it; a receiver may hold
data until it sees PSH, and must not hold it forever. Linux sets PSH at the
end of every write and at least every half window. ``Stack.poll(hold=True)``
asks this of a burst's last segment: a data segment without PSH says more of
the same write is on its way, so the round can leave the application's
notifications (and the in-order ACK) to the next one, and the application
reads the whole write at once (the Driver bounds how long).

The question is asked of a classified segment (a ``_fastpath.Packet`` of kind
K_TCP or K_TCP6: our MAC, checksums verified), never of raw bytes: the stack
asks it only of a flow it owns (``Stack._mid_write``), so junk on the wire (a
frame to another MAC, a bad checksum, a flow not ours) never holds a flush.
"""

from __future__ import annotations

PSH, FIN, SYN, RST = 0x08, 0x01, 0x02, 0x04


def data_without_push(seg) -> bool:
    """True when the TCP segment ``seg`` (its ``flags`` and ``payload_len``, as a classify record has them)
    carries data and none of PSH, FIN, SYN, RST."""
    return seg.payload_len > 0 and not seg.flags & (PSH | FIN | SYN | RST)
