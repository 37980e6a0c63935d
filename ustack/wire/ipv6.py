"""IPv6 header (RFC 8200) and its extension headers: parse/emit, and the chain walk with a limit.

``Ipv6Header.parse(buf)`` validates, in this order: length
(``ipv6.truncated``), version (``ipv6.bad_version``) and payload length
(``ipv6.bad_payload_length``: the payload must fit the buffer; bytes past
it are Ethernet padding). A payload length of zero with a Jumbo Payload
option (RFC 2675) is not supported: such a packet fails the same check.

Extension headers (RFC 8200 section 4) have their own Repr classes:
``OptionsHeader`` for Hop-by-Hop Options (0) and Destination Options (60),
``RoutingHeader`` (43) and ``FragmentHeader`` (44). ``walk(buf, offset,
next_header, max_headers)`` follows a chain from ``offset`` (a view of the
packet from its IPv6 header) and stops at the first header that is not an
extension header (the upper layer, or No Next Header 59) or at a Fragment
header (what follows it is the fragmentable part: reassembly comes first).
The walk applies the receive rules a host must apply, each failure a
``ParameterProblem`` carrying the ICMPv6 code and pointer (RFC 4443 3.4)
and a named reason:

- a Hop-by-Hop header anywhere but first (``ipv6.hbh_not_first``, code 1:
  RFC 8200 4.1);
- an option whose type says "discard" (high bits 01, 10, 11: RFC 8200 4.2)
  and that we do not know (``ipv6.unknown_option``; code 2 when the type
  asks for an ICMP, which the caller must not send for 11 to a multicast
  destination); a malformed option list (``ipv6.bad_options``);
- a Routing header with Segments Left > 0 (``ipv6.routing_header``, code 0,
  pointer at the Routing Type field): we are a host, never a router, so no
  routing type is processed; type 0 above all (RFC 5095: RH0 is deprecated
  and must be treated as unrecognised);
- more than ``max_headers`` extension headers (``ipv6.too_many_headers``):
  a chain of any length must not buy unbounded work.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ustack.wire import WireError

VERSION = 6
HEADER_LEN = 40
MIN_MTU = 1280  # RFC 8200 section 5

NH_HOP_BY_HOP = 0
NH_ROUTING = 43
NH_FRAGMENT = 44
NH_ESP = 50
NH_AH = 51
NH_NO_NEXT = 59
NH_DEST_OPTS = 60
EXTENSION_HEADERS = frozenset((NH_HOP_BY_HOP, NH_ROUTING, NH_FRAGMENT, NH_DEST_OPTS))
MAX_EXTENSION_HEADERS = 8  # default limit of the chain walk

# ICMPv6 parameter problem codes (RFC 4443 3.4)
PP_ERRONEOUS_FIELD = 0
PP_UNRECOGNIZED_NEXT_HEADER = 1
PP_UNRECOGNIZED_OPTION = 2
PP_INCOMPLETE_CHAIN = 3  # RFC 7112

OPT_PAD1 = 0
OPT_PADN = 1
OPT_ROUTER_ALERT = 5  # RFC 2711

_FIXED = struct.Struct("!IHBB16s16s")
_FRAGMENT = struct.Struct("!BBHI")


class ParameterProblem(WireError):
    """A packet to discard with an ICMPv6 Parameter Problem (``code``, ``pointer`` from the IPv6 header).

    ``send_icmp`` is False when the rules forbid the message (option type
    high bits 00 or 01) and ``multicast_ok`` False for high bits 11 (no
    ICMP when the destination was multicast).
    """

    def __init__(self, reason: str, code: int, pointer: int, send_icmp: bool = True, multicast_ok: bool = True):
        super().__init__(reason, f"code {code}, pointer {pointer}")
        self.code = code
        self.pointer = pointer
        self.send_icmp = send_icmp
        self.multicast_ok = multicast_ok


@dataclass(frozen=True, slots=True)
class Ipv6Header:
    """The fixed 40-byte IPv6 header. ``payload_len`` counts extension headers and upper layer."""

    src: bytes
    dst: bytes
    next_header: int
    payload_len: int = 0
    hop_limit: int = 64
    traffic_class: int = 0
    flow_label: int = 0

    header_len = HEADER_LEN  # class constant, not a field

    @classmethod
    def parse(cls, buf) -> Ipv6Header:
        n = len(buf)
        if n < HEADER_LEN:
            raise WireError("ipv6.truncated", f"{n} bytes")
        word, plen, nh, hlim, src, dst = _FIXED.unpack_from(buf, 0)
        if word >> 28 != VERSION:
            raise WireError("ipv6.bad_version", f"version {word >> 28}")
        if HEADER_LEN + plen > n:
            raise WireError("ipv6.bad_payload_length", f"payload length {plen}, {n - HEADER_LEN} bytes")
        return cls(src, dst, nh, plen, hlim, (word >> 20) & 0xFF, word & 0xFFFFF)

    def payload(self, buf) -> memoryview:
        return memoryview(buf)[HEADER_LEN:HEADER_LEN + self.payload_len]

    def emit(self, buf, offset: int = 0) -> int:
        if len(self.src) != 16 or len(self.dst) != 16:
            raise ValueError("IPv6 addresses are 16 bytes")
        if not 0 <= self.payload_len <= 0xFFFF or not 0 <= self.flow_label <= 0xFFFFF:
            raise ValueError("payload length or flow label out of range")
        word = (VERSION << 28) | ((self.traffic_class & 0xFF) << 20) | self.flow_label
        _FIXED.pack_into(buf, offset, word, self.payload_len, self.next_header, self.hop_limit, self.src, self.dst)
        return HEADER_LEN


def _parse_options(data, base: int) -> tuple[tuple[int, bytes], ...]:
    """The TLV options of a Hop-by-Hop or Destination Options header (RFC 8200 4.2).

    ``base`` is the offset of ``data`` from the IPv6 header (for the pointer).
    Pad1 and PadN are skipped; an unknown option acts on its type's high bits.
    """
    out = []
    i, n = 0, len(data)
    while i < n:
        otype = data[i]
        if otype == OPT_PAD1:
            i += 1
            continue
        if i + 1 >= n or i + 2 + data[i + 1] > n:
            raise ParameterProblem("ipv6.bad_options", PP_ERRONEOUS_FIELD, base + i)
        olen = data[i + 1]
        if otype != OPT_PADN:
            if otype != OPT_ROUTER_ALERT:
                action = otype >> 6
                if action == 1:
                    raise ParameterProblem("ipv6.unknown_option", PP_UNRECOGNIZED_OPTION, base + i, send_icmp=False)
                if action >= 2:
                    raise ParameterProblem("ipv6.unknown_option", PP_UNRECOGNIZED_OPTION, base + i,
                                           multicast_ok=action == 2)
            out.append((otype, bytes(data[i + 2:i + 2 + olen])))
        i += 2 + olen
    return tuple(out)


@dataclass(frozen=True, slots=True)
class OptionsHeader:
    """Hop-by-Hop Options (0) or Destination Options (60). ``options``: (type, data), padding left out."""

    kind: int
    next_header: int
    options: tuple[tuple[int, bytes], ...] = ()

    @property
    def length(self) -> int:
        body = sum(2 + len(d) for _, d in self.options)
        return (2 + body + 7) & ~7

    @classmethod
    def parse(cls, kind: int, buf, offset: int = 0) -> OptionsHeader:
        if len(buf) - offset < 8:
            raise WireError("ipv6.truncated", "options header")
        total = (buf[offset + 1] + 1) * 8
        if len(buf) - offset < total:
            raise WireError("ipv6.truncated", "options header")
        return cls(kind, buf[offset], _parse_options(memoryview(buf)[offset + 2:offset + total], offset + 2))

    def emit(self, buf, offset: int = 0) -> int:
        total = self.length
        buf[offset] = self.next_header
        buf[offset + 1] = total // 8 - 1
        i = offset + 2
        for otype, data in self.options:
            buf[i] = otype
            buf[i + 1] = len(data)
            buf[i + 2:i + 2 + len(data)] = data
            i += 2 + len(data)
        pad = offset + total - i
        if pad == 1:
            buf[i] = OPT_PAD1
        elif pad > 1:  # PadN (RFC 8200 4.2)
            buf[i] = OPT_PADN
            buf[i + 1] = pad - 2
            buf[i + 2:i + pad] = bytes(pad - 2)
        return total


@dataclass(frozen=True, slots=True)
class RoutingHeader:
    """Routing header (43): type, segments left, and the type-specific data after the first 4 bytes."""

    next_header: int
    routing_type: int
    segments_left: int
    data: bytes = bytes(4)

    @property
    def length(self) -> int:
        return 4 + len(self.data)

    @classmethod
    def parse(cls, buf, offset: int = 0) -> RoutingHeader:
        if len(buf) - offset < 8:
            raise WireError("ipv6.truncated", "routing header")
        total = (buf[offset + 1] + 1) * 8
        if len(buf) - offset < total:
            raise WireError("ipv6.truncated", "routing header")
        return cls(buf[offset], buf[offset + 2], buf[offset + 3], bytes(buf[offset + 4:offset + total]))

    def emit(self, buf, offset: int = 0) -> int:
        total = self.length
        if total % 8:
            raise ValueError("a routing header is a multiple of 8 bytes")
        buf[offset:offset + 4] = bytes((self.next_header, total // 8 - 1, self.routing_type, self.segments_left))
        buf[offset + 4:offset + total] = self.data
        return total


@dataclass(frozen=True, slots=True)
class FragmentHeader:
    """Fragment header (44), RFC 8200 4.5. ``offset`` in bytes (a multiple of 8)."""

    next_header: int
    offset: int
    more: bool
    ident: int

    length = 8  # class constant

    @property
    def atomic(self) -> bool:
        """Offset 0 and M clear: the whole packet, fragment header or not (RFC 6946)."""
        return self.offset == 0 and not self.more

    @classmethod
    def parse(cls, buf, offset: int = 0) -> FragmentHeader:
        if len(buf) - offset < 8:
            raise WireError("ipv6.truncated", "fragment header")
        nh, _, field, ident = _FRAGMENT.unpack_from(buf, offset)
        return cls(nh, field & 0xFFF8, bool(field & 1), ident)

    def emit(self, buf, offset: int = 0) -> int:
        if self.offset & 7 or not 0 <= self.offset <= 0xFFF8:
            raise ValueError("fragment offset is a multiple of 8 below 65536")
        _FRAGMENT.pack_into(buf, offset, self.next_header, 0, self.offset | int(self.more), self.ident)
        return 8


@dataclass(frozen=True, slots=True)
class Chain:
    """What ``walk`` found: the headers in order, the protocol and offset where it stopped.

    ``fragment`` is the Fragment header the walk stopped after (``offset``
    is then where the fragmentable part starts), else None.
    """

    headers: tuple
    next_header: int
    offset: int
    fragment: FragmentHeader | None = None
    nh_pointer: int = 6  # offset of the Next Header field that named next_header (code-1 Parameter Problem pointer)


def walk(buf, offset: int, next_header: int, max_headers: int = MAX_EXTENSION_HEADERS) -> Chain:
    """Walk the extension headers of ``buf`` (from its IPv6 header) starting at ``offset``.

    ``next_header`` is the protocol of what lies at ``offset``; the walk
    ends at the upper layer or right after a Fragment header. The Next
    Header field's offset from the IPv6 header is the pointer of a code-1
    Parameter Problem (RFC 4443 3.4).
    """
    headers = []
    nh_field = 6  # where the Next Header value we follow was read (the fixed header's field)
    while next_header in EXTENSION_HEADERS:
        if len(headers) >= max_headers:
            raise WireError("ipv6.too_many_headers", f"more than {max_headers} extension headers")
        if next_header == NH_HOP_BY_HOP:
            if offset != HEADER_LEN:
                raise ParameterProblem("ipv6.hbh_not_first", PP_UNRECOGNIZED_NEXT_HEADER, nh_field)
            hdr = OptionsHeader.parse(NH_HOP_BY_HOP, buf, offset)
            size = (buf[offset + 1] + 1) * 8
        elif next_header == NH_DEST_OPTS:
            hdr = OptionsHeader.parse(NH_DEST_OPTS, buf, offset)
            size = (buf[offset + 1] + 1) * 8
        elif next_header == NH_ROUTING:
            hdr = RoutingHeader.parse(buf, offset)
            if hdr.segments_left:
                # RFC 8200 4.4 and RFC 5095: a host processes no routing type (type 0 is deprecated).
                raise ParameterProblem("ipv6.routing_header", PP_ERRONEOUS_FIELD, offset + 2)
            size = hdr.length
        else:
            hdr = FragmentHeader.parse(buf, offset)
            headers.append(hdr)
            return Chain(tuple(headers), hdr.next_header, offset + 8, hdr, offset)
        headers.append(hdr)
        nh_field = offset
        next_header = hdr.next_header
        offset += size
    return Chain(tuple(headers), next_header, offset, None, nh_field)
