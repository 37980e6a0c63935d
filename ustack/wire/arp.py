"""ARP for IPv4 over Ethernet (RFC 826): the 28-byte packet, parse/emit and reply helpers.

Field names are RFC 826's: ar$op -> ``operation``, ar$sha/ar$spa (sender
hardware/protocol address) -> ``sha``/``spa``, ar$tha/ar$tpa -> ``tha``/``tpa``.
Only hardware type 1 (Ethernet, hlen 6) with protocol 0x0800 (IPv4, plen 4)
is accepted; anything else is ``arp.bad_hardware`` / ``arp.bad_protocol``.
Trailing bytes (Ethernet padding) are ignored.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ustack.wire import WireError

HTYPE_ETHERNET = 1
PTYPE_IPV4 = 0x0800
OP_REQUEST = 1
OP_REPLY = 2

LENGTH = 28

_PACKET = struct.Struct("!HHBBH6s4s6s4s")


@dataclass(frozen=True, slots=True)
class ArpPacket:
    """One ARP request or reply; addresses are ``bytes`` (6 for hardware, 4 for protocol)."""

    operation: int
    sha: bytes
    spa: bytes
    tha: bytes
    tpa: bytes

    header_len = LENGTH  # class constants, not fields (no annotation)
    length = LENGTH

    @classmethod
    def request(cls, sha: bytes, spa: bytes, tpa: bytes) -> ArpPacket:
        """A who-has for ``tpa``; the target hardware address is zero (RFC 826 'don't care')."""
        return cls(OP_REQUEST, bytes(sha), bytes(spa), b"\0" * 6, bytes(tpa))

    @classmethod
    def announcement(cls, sha: bytes, spa: bytes) -> ArpPacket:
        """A gratuitous ARP request announcing ``spa`` at ``sha`` (RFC 5227 section 3)."""
        return cls(OP_REQUEST, bytes(sha), bytes(spa), b"\0" * 6, bytes(spa))

    def reply_to(self, sha: bytes) -> ArpPacket:
        """The is-at reply to this request, answering with hardware address ``sha``.

        RFC 826: swap sender and target, put our addresses in the sender
        fields, set the opcode to reply.
        """
        return ArpPacket(OP_REPLY, bytes(sha), self.tpa, self.sha, self.spa)

    @property
    def is_request(self) -> bool:
        return self.operation == OP_REQUEST

    @property
    def is_gratuitous(self) -> bool:
        return self.spa == self.tpa

    @classmethod
    def parse(cls, buf) -> ArpPacket:
        n = len(buf)
        if n < LENGTH:
            raise WireError("arp.truncated", f"{n} bytes")
        htype, ptype, hlen, plen, op, sha, spa, tha, tpa = _PACKET.unpack_from(buf, 0)
        if htype != HTYPE_ETHERNET or hlen != 6:
            raise WireError("arp.bad_hardware", f"htype {htype} hlen {hlen}")
        if ptype != PTYPE_IPV4 or plen != 4:
            raise WireError("arp.bad_protocol", f"ptype {ptype:#06x} plen {plen}")
        if op not in (OP_REQUEST, OP_REPLY):
            raise WireError("arp.bad_opcode", f"op {op}")
        return cls(op, sha, spa, tha, tpa)

    def emit(self, buf, offset: int = 0) -> int:
        """Write the 28-byte packet at ``offset``; returns 28."""
        if len(self.sha) != 6 or len(self.tha) != 6 or len(self.spa) != 4 or len(self.tpa) != 4:
            raise ValueError("ARP addresses are 6 (hardware) and 4 (protocol) bytes")
        if offset < 0 or len(buf) < offset + LENGTH:
            raise ValueError(f"buffer too small for an ARP packet at {offset}")
        _PACKET.pack_into(
            buf, offset, HTYPE_ETHERNET, PTYPE_IPV4, 6, 4, self.operation,
            self.sha, self.spa, self.tha, self.tpa,
        )
        return LENGTH
