"""ICMP for IPv4 (RFC 792): echo request/reply and the error messages that quote a datagram.

Every ICMP message is type, code, checksum and a 4-byte "rest of header",
then a body. ``IcmpMessage`` keeps the rest of header as two 16-bit halves,
``ident`` and ``seq``: for echo they are the identifier and sequence number;
for the other types they are the raw halves, read through ``next_hop_mtu``
(destination unreachable, code 4, RFC 1191), ``pointer`` (parameter problem)
and ``gateway`` (redirect). ``payload`` is the echo data, or, for an error,
the quoted original datagram (its IP header and at least the first 8 bytes
of its payload). ``parse`` takes the ICMP message alone (the IP payload,
already cut at the IP total length) and verifies the checksum over all of it.
"""

from __future__ import annotations

import errno
import struct
from dataclasses import dataclass

from ustack.wire import WireError
from ustack.wire.checksum import internet_checksum

HEADER_LEN = 8

ECHO_REPLY = 0
DEST_UNREACHABLE = 3
SOURCE_QUENCH = 4
REDIRECT = 5
ECHO_REQUEST = 8
TIME_EXCEEDED = 11
PARAMETER_PROBLEM = 12
TIMESTAMP = 13
TIMESTAMP_REPLY = 14

ERROR_TYPES = frozenset((DEST_UNREACHABLE, SOURCE_QUENCH, REDIRECT, TIME_EXCEEDED, PARAMETER_PROBLEM))

# Destination unreachable codes (RFC 792, RFC 1122 section 3.2.2.1).
NET_UNREACHABLE = 0
HOST_UNREACHABLE = 1
PROTOCOL_UNREACHABLE = 2
PORT_UNREACHABLE = 3
FRAGMENTATION_NEEDED = 4
SOURCE_ROUTE_FAILED = 5
ADMIN_PROHIBITED = 13

# Time exceeded codes.
TTL_EXCEEDED = 0
REASSEMBLY_TIME_EXCEEDED = 1

# RFC 1812 section 4.3.2.3: an error carries as much of the original datagram
# as fits in 576 bytes (IP header 20 + ICMP header 8 + quote).
MAX_QUOTE_LEN = 576 - 20 - HEADER_LEN

_HEADER = struct.Struct("!BBHHH")
_CHECKSUM = struct.Struct("!H")



def error_to_oserror(itype: int, code: int) -> OSError:
    """The errno an ICMP error reports on a socket (RFC 1122 4.1.3.3 / 4.2.3.9; Linux's icmp_err_convert).

    Protocol and port unreachable are ECONNREFUSED, fragmentation needed is
    EMSGSIZE, the network-unreachable family ENETUNREACH, other destination
    unreachable codes and time exceeded EHOSTUNREACH.
    """
    if itype == DEST_UNREACHABLE:
        if code in (PROTOCOL_UNREACHABLE, PORT_UNREACHABLE):
            return ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
        if code == FRAGMENTATION_NEEDED:
            return OSError(errno.EMSGSIZE, "Message too long (fragmentation needed)")
        if code in (0, 6, 9, 11):
            return OSError(errno.ENETUNREACH, "Network is unreachable")
        return OSError(errno.EHOSTUNREACH, "No route to host")
    return OSError(errno.EHOSTUNREACH, "No route to host (time exceeded)")


@dataclass(frozen=True, slots=True)
class IcmpMessage:
    """One ICMPv4 message; ``checksum`` is as parsed (``emit`` recomputes it)."""

    type: int
    code: int = 0
    ident: int = 0
    seq: int = 0
    payload: bytes = b""
    checksum: int = 0

    header_len = HEADER_LEN  # class constant, not a field

    @property
    def length(self) -> int:
        """Bytes of the whole message (header and payload): what ``emit`` writes."""
        return HEADER_LEN + len(self.payload)

    @property
    def is_error(self) -> bool:
        return self.type in ERROR_TYPES

    @property
    def quoted(self) -> bytes:
        """The original datagram an error message quotes (the payload)."""
        return self.payload

    @property
    def next_hop_mtu(self) -> int:
        """Destination unreachable / fragmentation needed: next-hop MTU (RFC 1191)."""
        return self.seq

    @property
    def pointer(self) -> int:
        """Parameter problem: octet of the original header in error (RFC 792)."""
        return self.ident >> 8

    @property
    def gateway(self) -> bytes:
        """Redirect: the gateway address (RFC 792)."""
        return ((self.ident << 16) | self.seq).to_bytes(4, "big")

    @classmethod
    def echo_request(cls, ident: int, seq: int, payload: bytes = b"") -> IcmpMessage:
        return cls(ECHO_REQUEST, 0, ident, seq, bytes(payload))

    def echo_reply(self) -> IcmpMessage:
        """The reply to this echo request: same identifier, sequence and data (RFC 792)."""
        return IcmpMessage(ECHO_REPLY, 0, self.ident, self.seq, self.payload)

    @classmethod
    def error(cls, type: int, code: int, original, rest: int = 0) -> IcmpMessage:
        """An error quoting ``original`` (IP header onwards), cut to ``MAX_QUOTE_LEN``.

        ``rest`` is the 32-bit rest-of-header word (MTU, pointer, gateway).
        """
        return cls(type, code, rest >> 16, rest & 0xFFFF, bytes(original[:MAX_QUOTE_LEN]))

    @classmethod
    def dest_unreachable(cls, code: int, original, next_hop_mtu: int = 0) -> IcmpMessage:
        return cls.error(DEST_UNREACHABLE, code, original, next_hop_mtu)

    @classmethod
    def time_exceeded(cls, code: int, original) -> IcmpMessage:
        return cls.error(TIME_EXCEEDED, code, original)

    @classmethod
    def parse(cls, buf, verify_checksum: bool = True) -> IcmpMessage:
        n = len(buf)
        if n < HEADER_LEN:
            raise WireError("icmp.truncated", f"{n} bytes")
        type_, code, checksum, ident, seq = _HEADER.unpack_from(buf, 0)
        if verify_checksum and internet_checksum(buf) != 0:
            raise WireError("icmp.bad_checksum", f"checksum {checksum:#06x}")
        return cls(type_, code, ident, seq, bytes(buf[HEADER_LEN:]), checksum)

    def emit(self, buf, offset: int = 0) -> int:
        """Write the whole message at ``offset``, computing the checksum; returns its length."""
        n = self.length
        if offset < 0 or len(buf) < offset + n:
            raise ValueError(f"buffer too small for a {n}-byte ICMP message at {offset}")
        _HEADER.pack_into(buf, offset, self.type, self.code, 0, self.ident, self.seq)
        buf[offset + HEADER_LEN : offset + n] = self.payload
        csum = internet_checksum(memoryview(buf)[offset : offset + n])
        _CHECKSUM.pack_into(buf, offset + 2, csum)
        return n
