"""ICMPv6 (RFC 4443) and the Neighbor Discovery messages (RFC 4861 section 4): parse/emit.

Every ICMPv6 message is type, code, checksum, a 4-byte "rest of header"
(``rest``) and a body. ``rest`` is the echo identifier and sequence number
(``ident``/``seq``), the MTU of Packet Too Big, the pointer of Parameter
Problem, and unused or flags elsewhere. The checksum covers the IPv6
pseudo-header (RFC 8200 8.1, next header 58), so ``parse`` and ``emit``
take the source and destination addresses.

Neighbor Discovery messages are views over an ``Icmpv6Message``:
``NeighborSolicit``, ``NeighborAdvert``, ``RouterSolicit`` and
``RouterAdvert`` with their options (source/target link-layer address,
prefix information, MTU; others kept raw). Parse errors are
``ndp.bad_length`` (a body shorter than the message's fixed part) and
``ndp.bad_option`` (an option of length zero, or one running past the
message: RFC 4861 4.6 says to discard the packet).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ustack.wire import WireError
from ustack.wire.checksum import ones_sum, pseudo_header_sum
from ustack.wire.proto import PROTO_ICMPV6

HEADER_LEN = 8

DEST_UNREACHABLE = 1
PACKET_TOO_BIG = 2
TIME_EXCEEDED = 3
PARAMETER_PROBLEM = 4
ECHO_REQUEST = 128
ECHO_REPLY = 129
ROUTER_SOLICIT = 133
ROUTER_ADVERT = 134
NEIGHBOR_SOLICIT = 135
NEIGHBOR_ADVERT = 136
REDIRECT = 137

ERROR_TYPES = frozenset((DEST_UNREACHABLE, PACKET_TOO_BIG, TIME_EXCEEDED, PARAMETER_PROBLEM))
NDP_TYPES = frozenset((ROUTER_SOLICIT, ROUTER_ADVERT, NEIGHBOR_SOLICIT, NEIGHBOR_ADVERT, REDIRECT))

# Destination unreachable codes (RFC 4443 3.1)
NO_ROUTE = 0
ADMIN_PROHIBITED = 1
BEYOND_SCOPE = 2
ADDRESS_UNREACHABLE = 3
PORT_UNREACHABLE = 4
# Time exceeded codes (RFC 4443 3.3)
HOP_LIMIT_EXCEEDED = 0
REASSEMBLY_TIME_EXCEEDED = 1

# RFC 4443 2.4 (c): an error carries as much of the offending packet as fits in the minimum MTU.
MAX_ERROR_LEN = 1280 - 40

# Neighbor Discovery option types (RFC 4861 4.6)
OPT_SOURCE_LLA = 1
OPT_TARGET_LLA = 2
OPT_PREFIX_INFO = 3
OPT_REDIRECTED = 4
OPT_MTU = 5

# Neighbor Advertisement flags (in rest)
NA_ROUTER = 0x80000000
NA_SOLICITED = 0x40000000
NA_OVERRIDE = 0x20000000

# Prefix information flags
PI_ON_LINK = 0x80
PI_AUTONOMOUS = 0x40

_HEADER = struct.Struct("!BBHI")
_PREFIX = struct.Struct("!BBIII16s")
_RA = struct.Struct("!II")


def checksum_of(buf, src: bytes, dst: bytes) -> int:
    """The checksum field value for the ICMPv6 message ``buf`` (its checksum field read as zero)."""
    data = bytearray(buf)
    data[2:4] = b"\0\0"
    return (~ones_sum(data, pseudo_header_sum(src, dst, PROTO_ICMPV6, len(data)))) & 0xFFFF


@dataclass(frozen=True, slots=True)
class Icmpv6Message:
    """One ICMPv6 message; ``checksum`` is as parsed (``emit`` recomputes it)."""

    type: int
    code: int = 0
    rest: int = 0
    body: bytes = b""
    checksum: int = 0

    header_len = HEADER_LEN  # class constant, not a field

    @property
    def length(self) -> int:
        return HEADER_LEN + len(self.body)

    @property
    def is_error(self) -> bool:
        return self.type < 128

    @property
    def ident(self) -> int:
        return self.rest >> 16

    @property
    def seq(self) -> int:
        return self.rest & 0xFFFF

    @property
    def mtu(self) -> int:
        """Packet Too Big: the MTU of the next-hop link (RFC 4443 3.2)."""
        return self.rest

    @property
    def pointer(self) -> int:
        """Parameter Problem: the offset of the offending octet (RFC 4443 3.4)."""
        return self.rest

    @classmethod
    def echo_request(cls, ident: int, seq: int, payload: bytes = b"") -> Icmpv6Message:
        return cls(ECHO_REQUEST, 0, (ident << 16) | seq, bytes(payload))

    def echo_reply(self) -> Icmpv6Message:
        return Icmpv6Message(ECHO_REPLY, 0, self.rest, self.body)

    @classmethod
    def error(cls, type: int, code: int, original, rest: int = 0) -> Icmpv6Message:
        """An error quoting ``original`` (the offending packet from its IPv6 header), cut at 1280 bytes in all."""
        return cls(type, code, rest, bytes(original[:MAX_ERROR_LEN - HEADER_LEN]))

    @classmethod
    def parse(cls, buf, src: bytes, dst: bytes, verify_checksum: bool = True) -> Icmpv6Message:
        n = len(buf)
        if n < HEADER_LEN:
            raise WireError("icmpv6.truncated", f"{n} bytes")
        if verify_checksum and ones_sum(buf, pseudo_header_sum(src, dst, PROTO_ICMPV6, n)) != 0xFFFF:
            raise WireError("icmpv6.bad_checksum")
        itype, code, csum, rest = _HEADER.unpack_from(buf, 0)
        return cls(itype, code, rest, bytes(buf[HEADER_LEN:]), csum)

    def emit(self, buf, src: bytes, dst: bytes, offset: int = 0) -> int:
        n = self.length
        _HEADER.pack_into(buf, offset, self.type, self.code, 0, self.rest)
        buf[offset + HEADER_LEN:offset + n] = self.body
        csum = (~ones_sum(memoryview(buf)[offset:offset + n], pseudo_header_sum(src, dst, PROTO_ICMPV6, n))) & 0xFFFF
        struct.pack_into("!H", buf, offset + 2, csum)
        return n

    def to_bytes(self, src: bytes, dst: bytes) -> bytearray:
        buf = bytearray(self.length)
        self.emit(buf, src, dst)
        return buf


# -- Neighbor Discovery options (RFC 4861 4.6) ---------------------------------------------------

@dataclass(frozen=True, slots=True)
class PrefixInfo:
    """Prefix Information option (RFC 4861 4.6.2); lifetimes in seconds (0xffffffff = infinity)."""

    prefix: bytes
    length: int
    flags: int = PI_ON_LINK | PI_AUTONOMOUS
    valid_lifetime: int = 0xFFFFFFFF
    preferred_lifetime: int = 0xFFFFFFFF

    @property
    def on_link(self) -> bool:
        return bool(self.flags & PI_ON_LINK)

    @property
    def autonomous(self) -> bool:
        return bool(self.flags & PI_AUTONOMOUS)

    def encode(self) -> bytes:
        return bytes((OPT_PREFIX_INFO, 4)) + _PREFIX.pack(self.length, self.flags, self.valid_lifetime,
                                                         self.preferred_lifetime, 0, self.prefix)


def parse_options(data) -> tuple:
    """The option list: (type, value) pairs; link-layer addresses as 6 bytes, prefix info as
    ``PrefixInfo``, MTU as an int, other types as raw bytes (what follows type and length)."""
    out = []
    i, n = 0, len(data)
    while i < n:
        if i + 2 > n:
            raise WireError("ndp.bad_option", "truncated option")
        otype, olen = data[i], data[i + 1] * 8
        if olen == 0 or i + olen > n:
            raise WireError("ndp.bad_option", f"option {otype} length {olen}")
        value = bytes(data[i + 2:i + olen])
        if otype in (OPT_SOURCE_LLA, OPT_TARGET_LLA):
            value = value[:6]
        elif otype == OPT_PREFIX_INFO:
            if olen != 32:
                raise WireError("ndp.bad_option", f"prefix information length {olen}")
            plen, flags, valid, preferred, _, prefix = _PREFIX.unpack_from(value, 0)
            value = PrefixInfo(prefix, plen, flags, valid, preferred)
        elif otype == OPT_MTU:
            if olen != 8:
                raise WireError("ndp.bad_option", f"MTU option length {olen}")
            value = int.from_bytes(value[2:6], "big")
        out.append((otype, value))
        i += olen
    return tuple(out)


def encode_options(options) -> bytes:
    out = bytearray()
    for otype, value in options:
        if otype in (OPT_SOURCE_LLA, OPT_TARGET_LLA):
            out += bytes((otype, 1)) + bytes(value)
        elif otype == OPT_PREFIX_INFO:
            out += value.encode()
        elif otype == OPT_MTU:
            out += bytes((OPT_MTU, 1, 0, 0)) + value.to_bytes(4, "big")
        else:
            raw = bytes(value)
            total = (2 + len(raw) + 7) & ~7
            out += bytes((otype, total // 8)) + raw + bytes(total - 2 - len(raw))
    return bytes(out)


def _option(options, otype: int):
    for t, v in options:
        if t == otype:
            return v
    return None


@dataclass(frozen=True, slots=True)
class NeighborSolicit:
    """Neighbor Solicitation (RFC 4861 4.3)."""

    target: bytes
    options: tuple = ()

    @property
    def source_lla(self):
        return _option(self.options, OPT_SOURCE_LLA)

    @classmethod
    def from_message(cls, msg: Icmpv6Message) -> NeighborSolicit:
        if len(msg.body) < 16:
            raise WireError("ndp.bad_length", "neighbor solicitation")
        return cls(msg.body[:16], parse_options(msg.body[16:]))

    def to_message(self) -> Icmpv6Message:
        return Icmpv6Message(NEIGHBOR_SOLICIT, 0, 0, bytes(self.target) + encode_options(self.options))


@dataclass(frozen=True, slots=True)
class NeighborAdvert:
    """Neighbor Advertisement (RFC 4861 4.4); ``flags`` are the NA_* bits of the rest word."""

    target: bytes
    flags: int = 0
    options: tuple = ()

    @property
    def router(self) -> bool:
        return bool(self.flags & NA_ROUTER)

    @property
    def solicited(self) -> bool:
        return bool(self.flags & NA_SOLICITED)

    @property
    def override(self) -> bool:
        return bool(self.flags & NA_OVERRIDE)

    @property
    def target_lla(self):
        return _option(self.options, OPT_TARGET_LLA)

    @classmethod
    def from_message(cls, msg: Icmpv6Message) -> NeighborAdvert:
        if len(msg.body) < 16:
            raise WireError("ndp.bad_length", "neighbor advertisement")
        return cls(msg.body[:16], msg.rest & 0xE0000000, parse_options(msg.body[16:]))

    def to_message(self) -> Icmpv6Message:
        return Icmpv6Message(NEIGHBOR_ADVERT, 0, self.flags, bytes(self.target) + encode_options(self.options))


@dataclass(frozen=True, slots=True)
class RouterSolicit:
    """Router Solicitation (RFC 4861 4.1)."""

    options: tuple = ()

    @property
    def source_lla(self):
        return _option(self.options, OPT_SOURCE_LLA)

    @classmethod
    def from_message(cls, msg: Icmpv6Message) -> RouterSolicit:
        return cls(parse_options(msg.body))

    def to_message(self) -> Icmpv6Message:
        return Icmpv6Message(ROUTER_SOLICIT, 0, 0, encode_options(self.options))


@dataclass(frozen=True, slots=True)
class RouterAdvert:
    """Router Advertisement (RFC 4861 4.2); times in seconds (lifetime) and milliseconds (the others)."""

    cur_hop_limit: int = 64
    flags: int = 0
    router_lifetime: int = 1800
    reachable_time: int = 0
    retrans_timer: int = 0
    options: tuple = ()

    @property
    def source_lla(self):
        return _option(self.options, OPT_SOURCE_LLA)

    @property
    def mtu(self):
        return _option(self.options, OPT_MTU)

    @property
    def prefixes(self) -> tuple:
        return tuple(v for t, v in self.options if t == OPT_PREFIX_INFO)

    @classmethod
    def from_message(cls, msg: Icmpv6Message) -> RouterAdvert:
        if len(msg.body) < 8:
            raise WireError("ndp.bad_length", "router advertisement")
        reachable, retrans = _RA.unpack_from(msg.body, 0)
        rest = msg.rest
        return cls(rest >> 24, (rest >> 16) & 0xFF, rest & 0xFFFF, reachable, retrans, parse_options(msg.body[8:]))

    def to_message(self) -> Icmpv6Message:
        rest = (self.cur_hop_limit << 24) | (self.flags << 16) | self.router_lifetime
        return Icmpv6Message(ROUTER_ADVERT, 0, rest,
                             _RA.pack(self.reachable_time, self.retrans_timer) + encode_options(self.options))


@dataclass(frozen=True, slots=True)
class Redirect:
    """Redirect (RFC 4861 4.5): ``destination`` is better reached through ``target`` (a router, or the
    destination itself when it is on-link)."""

    target: bytes
    destination: bytes
    options: tuple = ()

    @property
    def target_lla(self):
        return _option(self.options, OPT_TARGET_LLA)

    @classmethod
    def from_message(cls, msg: Icmpv6Message) -> Redirect:
        # RFC 4861 8.1: the ICMP length is 40 octets or more (8 of header, the two addresses).
        if len(msg.body) < 32:
            raise WireError("ndp.bad_length", "redirect")
        return cls(bytes(msg.body[:16]), bytes(msg.body[16:32]), parse_options(msg.body[32:]))

    def to_message(self) -> Icmpv6Message:
        return Icmpv6Message(REDIRECT, 0, 0, bytes(self.target) + bytes(self.destination)
                             + encode_options(self.options))
