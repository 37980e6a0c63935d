"""Is a received frame a TCP segment in the middle of its sender's write (data, PSH clear)?

RFC 9293 3.9.1.2 (after RFC 1122 4.2.2.2): a sender sets PSH on the last
segment of the data an application write handed it; a receiver may hold
data until it sees PSH, and must not hold it forever. Linux sets PSH at the
end of every write and at least every half window. ``Stack.poll(hold=True)``
asks this of a burst's last frame: a data segment without PSH says more of
the same write is on its way, so the round can leave the application's
notifications (and the in-order ACK) to the next one, and the application
reads the whole write at once (the Driver bounds how long).

Only a peek at raw bytes, every length checked before a field is read: an
Ethernet II frame (no VLAN tag) with IPv4 (not a fragment) or IPv6 (TCP as
the first next header); anything else is not mid-write.
"""

from __future__ import annotations

ETH_LEN = 14
PSH, FIN, SYN, RST = 0x08, 0x01, 0x02, 0x04


def data_without_push(frame) -> bool:
    """True when ``frame`` carries a TCP segment with data and none of PSH, FIN, SYN, RST."""
    n = len(frame)
    if n < ETH_LEN + 20:
        return False
    etype = (frame[12] << 8) | frame[13]
    if etype == 0x0800:
        vihl = frame[14]
        ihl = (vihl & 0x0F) * 4
        if vihl >> 4 != 4 or ihl < 20 or frame[23] != 6 or (((frame[20] << 8) | frame[21]) & 0x3FFF):
            return False  # not IPv4, not TCP, or a fragment
        ip_len = (frame[16] << 8) | frame[17]
        l4 = ETH_LEN + ihl
        l4_len = ip_len - ihl
        if ip_len > n - ETH_LEN:
            return False
    elif etype == 0x86DD:
        if n < ETH_LEN + 40 or frame[14] >> 4 != 6 or frame[20] != 6:
            return False
        l4 = ETH_LEN + 40
        l4_len = (frame[18] << 8) | frame[19]
        if l4_len > n - l4:
            return False
    else:
        return False
    if l4_len < 20:
        return False
    doff = (frame[l4 + 12] >> 4) * 4
    if doff < 20 or l4_len <= doff:
        return False  # no data
    return not frame[l4 + 13] & (PSH | FIN | SYN | RST)
