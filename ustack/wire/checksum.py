"""The Internet checksum (RFC 1071), reference implementation in pure Python.

The fast path has its own C loop (``ustack._fastpath.checksum``); tests
compare the two. This one folds the whole buffer as one big integer:
2**16 == 1 (mod 0xffff), so the ones'-complement sum of 16-bit words is the
integer value modulo 0xffff, with 0xffff standing for a non-zero multiple.
"""

from __future__ import annotations


def ones_sum(data, initial: int = 0) -> int:
    """Ones'-complement sum of ``data`` as 16-bit big-endian words plus ``initial`` (0..0xffff)."""
    if len(data) & 1:
        data = bytes(data) + b"\0"
    value = int.from_bytes(data, "big") + initial
    if value == 0:
        return 0
    folded = value % 0xFFFF
    return folded if folded else 0xFFFF


def internet_checksum(data, initial: int = 0) -> int:
    """The 16-bit value to put in a checksum field (ones' complement of the sum)."""
    return (~ones_sum(data, initial)) & 0xFFFF


def pseudo_header_sum(src, dst, proto: int, length: int) -> int:
    """Ones'-complement sum of the pseudo-header that TCP and UDP checksums cover.

    IPv4 (4-byte addresses, RFC 9293 3.1 / RFC 768): src, dst, zero, protocol,
    16-bit length. IPv6 (16-byte addresses, RFC 8200 section 8.1): src, dst,
    32-bit upper-layer length, three zero bytes, next header.
    """
    src, dst = bytes(src), bytes(dst)
    if len(src) != len(dst) or len(src) not in (4, 16):
        raise ValueError("pseudo-header addresses are both 4 (IPv4) or both 16 (IPv6) bytes")
    if len(src) == 4:
        return ones_sum(src + dst + bytes((0, proto)) + length.to_bytes(2, "big"))
    return ones_sum(src + dst + length.to_bytes(4, "big") + bytes((0, 0, 0, proto)))
