"""UDP header (RFC 768): parse with pseudo-header checksum check, emit with checksum.

``UdpHeader.parse(buf, src, dst)`` takes the UDP datagram (the IP payload);
bytes past the UDP length field are padding and ignored. The checksum covers
the IPv4 pseudo-header (``src``, ``dst``, protocol 17, UDP length), the
header and the payload. A checksum field of zero means "no checksum"
(RFC 768) and is accepted; a computed zero is sent as 0xffff.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ustack.wire import WireError
from ustack.wire.checksum import ones_sum, pseudo_header_sum
from ustack.wire.proto import PROTO_UDP

HEADER_LEN = 8

_HEADER = struct.Struct("!HHHH")
_CHECKSUM = struct.Struct("!H")


@dataclass(frozen=True, slots=True)
class UdpHeader:
    """A UDP header. ``length`` is the UDP length field (header + payload)."""

    src_port: int
    dst_port: int
    length: int = HEADER_LEN
    checksum: int = 0

    header_len = HEADER_LEN  # class constant, not a field

    @property
    def payload_len(self) -> int:
        return self.length - HEADER_LEN

    def payload(self, buf) -> memoryview:
        """The payload of the datagram this header was parsed from (no copy)."""
        return memoryview(buf)[HEADER_LEN : self.length]

    @classmethod
    def parse(cls, buf, src, dst, verify_checksum: bool = True) -> UdpHeader:
        """Validate and parse; ``src``/``dst`` are the 4-byte IPv4 addresses for the pseudo-header."""
        n = len(buf)
        if n < HEADER_LEN:
            raise WireError("udp.truncated", f"{n} bytes")
        src_port, dst_port, length, checksum = _HEADER.unpack_from(buf, 0)
        if length < HEADER_LEN or length > n:
            raise WireError("udp.bad_length", f"length {length}, {n} bytes")
        if verify_checksum and checksum != 0:
            if ones_sum(memoryview(buf)[:length], pseudo_header_sum(src, dst, PROTO_UDP, length)) != 0xFFFF:
                raise WireError("udp.bad_checksum", f"checksum {checksum:#06x}")
        return cls(src_port, dst_port, length, checksum)

    def emit(self, buf, offset: int, src, dst, payload=None, with_checksum: bool = True) -> int:
        """Write the header at ``offset`` and fill in the checksum; returns 8.

        ``payload=None``: the payload is already in ``buf`` right after the
        header, ``self.length - 8`` bytes of it. Otherwise ``payload`` (which
        must be ``self.length - 8`` bytes) is copied there first.
        ``with_checksum=False`` sends zero ("no checksum", or left to offload).
        """
        length = self.length
        if length < HEADER_LEN or length > 0xFFFF:
            raise ValueError(f"UDP length {length}")
        if payload is not None and len(payload) != length - HEADER_LEN:
            raise ValueError(f"payload is {len(payload)} bytes, UDP length says {length - HEADER_LEN}")
        if offset < 0 or len(buf) < offset + length:
            raise ValueError(f"buffer too small for a {length}-byte UDP datagram at {offset}")
        _HEADER.pack_into(buf, offset, self.src_port, self.dst_port, length, 0)
        if payload is not None:
            buf[offset + HEADER_LEN : offset + length] = payload
        if with_checksum:
            csum = (~ones_sum(memoryview(buf)[offset : offset + length], pseudo_header_sum(src, dst, PROTO_UDP, length))) & 0xFFFF
            # RFC 768: a computed zero is transmitted as all ones.
            _CHECKSUM.pack_into(buf, offset + 6, csum or 0xFFFF)
        return HEADER_LEN
