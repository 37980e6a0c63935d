"""IPv4 header (RFC 791) with options: parse/emit, option list codec, address helpers.

``Ipv4Header.parse(buf)`` validates, in this order: length (``ipv4.truncated``),
version (``ipv4.bad_version``), IHL (``ipv4.bad_ihl``), total length
(``ipv4.bad_total_length``), header checksum (``ipv4.bad_checksum``) and the
option list (``ipv4.bad_options``). The payload is
``buf[hdr.header_len:hdr.total_length]``; bytes past the total length
(Ethernet padding) are not part of the datagram.

Options are kept raw in ``options`` (what lies between byte 20 and IHL*4,
padding included); ``parsed_options`` gives them as ``(type, data)`` pairs,
``data`` being what follows the type and length octets. EOL, NOP, Record
Route, the source routes (same layout as Record Route) and Timestamp are
understood; other options are kept raw.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from ustack.wire import WireError
from ustack.wire.checksum import internet_checksum

VERSION = 4
MIN_HEADER_LEN = 20
MAX_HEADER_LEN = 60
MAX_OPTIONS_LEN = MAX_HEADER_LEN - MIN_HEADER_LEN

from ustack.wire.proto import PROTO_ICMP, PROTO_TCP, PROTO_UDP  # noqa: F401  (re-exported)

# Option types (RFC 791 section 3.1; copied flag | class | number).
IPOPT_EOL = 0
IPOPT_NOP = 1
IPOPT_RR = 7
IPOPT_TS = 68
IPOPT_LSRR = 131
IPOPT_SSRR = 137
IPOPT_RA = 148  # Router Alert, RFC 2113

# Timestamp option flags (RFC 791 section 3.1, "Internet Timestamp").
TS_ONLY = 0
TS_AND_ADDR = 1
TS_PRESPEC = 3

_FIXED = struct.Struct("!BBHHHBBH4s4s")
_CHECKSUM = struct.Struct("!H")


def ip_to_bytes(text: str) -> bytes:
    """``"198.18.0.1"`` -> 4 bytes."""
    return socket.inet_aton(text)


def bytes_to_ip(addr) -> str:
    """4 bytes -> ``"198.18.0.1"``."""
    return socket.inet_ntoa(bytes(addr))


def _bad_options(detail: str) -> WireError:
    return WireError("ipv4.bad_options", detail)


@dataclass(frozen=True, slots=True)
class RecordRoute:
    """Record Route (type 7) or Loose/Strict Source Route (131/137), RFC 791 section 3.1.

    ``pointer`` is the option-relative octet index (from 1) of the next free
    slot, so 4 means empty; ``slots`` are all the 4-byte address slots,
    recorded or not.
    """

    type: int = IPOPT_RR
    pointer: int = 4
    slots: tuple[bytes, ...] = ()

    @classmethod
    def empty(cls, n_slots: int, type: int = IPOPT_RR) -> RecordRoute:
        return cls(type, 4, (b"\0\0\0\0",) * n_slots)

    @property
    def recorded(self) -> tuple[bytes, ...]:
        """The addresses before the pointer (the route recorded so far)."""
        return self.slots[: max(0, (self.pointer - 4) // 4)]

    @classmethod
    def decode(cls, type: int, data) -> RecordRoute:
        """From an option's ``data`` (pointer octet and route data)."""
        # The route data is whole 4-byte slots and the pointer is at least 4
        # (RFC 791: "the smallest legal value is 4"). A pointer past the end
        # means the route is full; one inside the option must leave room for
        # a whole address (as Linux's ip_options_compile checks).
        length = len(data) + 2
        if len(data) < 1 or (len(data) - 1) % 4 or data[0] < 4:
            raise _bad_options(f"route option type {type}, data {len(data)} bytes")
        if data[0] <= length and data[0] + 3 > length:
            raise _bad_options(f"route option pointer {data[0]} splits a slot")
        slots = tuple(bytes(data[i : i + 4]) for i in range(1, len(data), 4))
        return cls(type, data[0], slots)

    def encode(self) -> bytes:
        """The whole option: type, length, pointer, slots."""
        return bytes((self.type, 3 + 4 * len(self.slots), self.pointer)) + b"".join(self.slots)


@dataclass(frozen=True, slots=True)
class Timestamp:
    """Internet Timestamp (type 68), RFC 791 section 3.1.

    ``entries`` are all slots as ``(address, timestamp)`` pairs; ``address``
    is None under flag ``TS_ONLY``. ``pointer`` is the octet index (from 1)
    of the next free slot: 5 means empty.
    """

    pointer: int = 5
    overflow: int = 0
    flag: int = TS_ONLY
    entries: tuple[tuple[bytes | None, int], ...] = ()

    type = IPOPT_TS  # class constant, not a field

    @property
    def recorded(self) -> tuple[tuple[bytes | None, int], ...]:
        size = 4 if self.flag == TS_ONLY else 8
        return self.entries[: max(0, (self.pointer - 5) // size)]

    @classmethod
    def decode(cls, data) -> Timestamp:
        """From an option's ``data`` (pointer, overflow/flag octet, slots)."""
        if len(data) < 2 or data[0] < 5:
            raise _bad_options(f"timestamp option, data {len(data)} bytes")
        pointer, oflw_flg = data[0], data[1]
        flag = oflw_flg & 0x0F
        body = data[2:]
        if flag == TS_ONLY:
            if len(body) % 4:
                raise _bad_options("timestamp slots are 4 bytes")
            entries = tuple(
                (None, int.from_bytes(body[i : i + 4], "big")) for i in range(0, len(body), 4)
            )
        elif flag in (TS_AND_ADDR, TS_PRESPEC):
            if len(body) % 8:
                raise _bad_options("address+timestamp slots are 8 bytes")
            entries = tuple(
                (bytes(body[i : i + 4]), int.from_bytes(body[i + 4 : i + 8], "big"))
                for i in range(0, len(body), 8)
            )
        else:
            raise _bad_options(f"timestamp flag {flag}")
        # A pointer past the end means the option is full (the overflow count
        # takes over); one inside it must leave room for a whole slot.
        size = 4 if flag == TS_ONLY else 8
        if pointer <= len(data) + 2 and pointer + size - 1 > len(data) + 2:
            raise _bad_options(f"timestamp pointer {pointer} splits a slot")
        return cls(pointer, oflw_flg >> 4, flag, entries)

    def encode(self) -> bytes:
        body = bytearray((self.pointer, (self.overflow << 4) | self.flag))
        for addr, ts in self.entries:
            if self.flag != TS_ONLY:
                body += addr if addr is not None else b"\0\0\0\0"
            body += ts.to_bytes(4, "big")
        return bytes((IPOPT_TS, 2 + len(body))) + bytes(body)


def parse_options(raw) -> list[tuple[int, bytes]]:
    """The option list as ``(type, data)`` pairs, stopping at End of Option List.

    NOP appears as ``(1, b"")``; EOL and what follows it (padding) are not
    listed. Raises ``ipv4.bad_options`` when a length octet is missing, below
    2 or runs past the end, or a Record Route / source route / Timestamp
    option is malformed.
    """
    items: list[tuple[int, bytes]] = []
    i, n = 0, len(raw)
    while i < n:
        kind = raw[i]
        if kind == IPOPT_EOL:
            break
        if kind == IPOPT_NOP:
            items.append((IPOPT_NOP, b""))
            i += 1
            continue
        if i + 1 >= n:
            raise _bad_options(f"option {kind} has no length octet")
        length = raw[i + 1]
        if length < 2 or i + length > n:
            raise _bad_options(f"option {kind} length {length} at {i} of {n}")
        data = bytes(raw[i + 2 : i + length])
        if kind in (IPOPT_RR, IPOPT_LSRR, IPOPT_SSRR):
            RecordRoute.decode(kind, data)
        elif kind == IPOPT_TS:
            Timestamp.decode(data)
        items.append((kind, data))
        i += length
    return items


def encode_options(items) -> bytes:
    """Option bytes from ``(type, data)`` pairs and/or ``RecordRoute``/``Timestamp``,
    padded with EOL to a multiple of 4. Raises ValueError beyond 40 bytes."""
    out = bytearray()
    for item in items:
        if isinstance(item, (RecordRoute, Timestamp)):
            out += item.encode()
            continue
        kind, data = item
        if kind in (IPOPT_EOL, IPOPT_NOP):
            out.append(kind)
        else:
            out += bytes((kind, 2 + len(data))) + bytes(data)
    out += b"\0" * (-len(out) % 4)
    if len(out) > MAX_OPTIONS_LEN:
        raise ValueError(f"{len(out)} bytes of options; at most {MAX_OPTIONS_LEN}")
    return bytes(out)


@dataclass(frozen=True, slots=True)
class Ipv4Header:
    """An IPv4 header. Addresses are 4-byte ``bytes``; ``frag_offset`` is in bytes.

    ``checksum`` is the value as parsed; ``emit`` always recomputes it.
    Version and IHL are implied (4, and 5 + options/4).
    """

    dscp: int = 0
    ecn: int = 0
    total_length: int = MIN_HEADER_LEN
    ident: int = 0
    flags_df: bool = False
    flags_mf: bool = False
    frag_offset: int = 0
    ttl: int = 64
    proto: int = 0
    checksum: int = 0
    src: bytes = b"\0\0\0\0"
    dst: bytes = b"\0\0\0\0"
    options: bytes = b""

    @property
    def header_len(self) -> int:
        """IHL*4: 20 plus the options padded to a multiple of 4."""
        return MIN_HEADER_LEN + ((len(self.options) + 3) & ~3)

    @property
    def length(self) -> int:
        """Bytes ``emit`` writes (same as ``header_len``)."""
        return self.header_len

    @property
    def payload_len(self) -> int:
        return self.total_length - self.header_len

    @property
    def is_fragment(self) -> bool:
        return self.flags_mf or self.frag_offset != 0

    @property
    def parsed_options(self) -> list[tuple[int, bytes]]:
        """``options`` as ``(type, data)`` pairs (see ``parse_options``)."""
        return parse_options(self.options)

    def payload(self, buf) -> memoryview:
        """The payload of the datagram this header was parsed from (no copy)."""
        return memoryview(buf)[self.header_len : self.total_length]

    @classmethod
    def parse(cls, buf, verify_checksum: bool = True, partial: bool = False) -> Ipv4Header:
        """Validate and parse the header at the start of ``buf``.

        ``verify_checksum=False`` skips the header checksum (offloaded).
        ``partial=True`` is for a datagram quoted in an ICMP error: the
        buffer may end before ``total_length`` (it must still hold the header).
        """
        n = len(buf)
        if n < MIN_HEADER_LEN:
            raise WireError("ipv4.truncated", f"{n} bytes")
        (ver_ihl, tos, total_length, ident, flags_frag, ttl, proto, checksum, src, dst) = (
            _FIXED.unpack_from(buf, 0)
        )
        version, ihl = ver_ihl >> 4, ver_ihl & 0x0F
        if version != VERSION:
            raise WireError("ipv4.bad_version", f"version {version}")
        header_len = ihl * 4
        if ihl < 5 or header_len > n:
            raise WireError("ipv4.bad_ihl", f"IHL {ihl} with {n} bytes")
        if total_length < header_len or (total_length > n and not partial):
            raise WireError("ipv4.bad_total_length", f"total length {total_length}, {n} bytes")
        if verify_checksum and internet_checksum(buf[:header_len]) != 0:
            raise WireError("ipv4.bad_checksum", f"checksum {checksum:#06x}")
        options = bytes(buf[MIN_HEADER_LEN:header_len])
        if options:
            parse_options(options)
        return cls(
            tos >> 2,
            tos & 0x03,
            total_length,
            ident,
            bool(flags_frag & 0x4000),
            bool(flags_frag & 0x2000),
            (flags_frag & 0x1FFF) * 8,
            ttl,
            proto,
            checksum,
            src,
            dst,
            options,
        )

    def emit(self, buf, offset: int = 0) -> int:
        """Write the header (options padded with EOL) at ``offset``, computing the checksum.

        Returns the header length. The payload is not touched.
        """
        hlen = self.header_len
        if hlen > MAX_HEADER_LEN:
            raise ValueError(f"{len(self.options)} bytes of options; at most {MAX_OPTIONS_LEN}")
        if self.frag_offset % 8 or not 0 <= self.frag_offset <= 0x1FFF * 8:
            raise ValueError(f"fragment offset {self.frag_offset} is not a multiple of 8 below 65536")
        if len(self.src) != 4 or len(self.dst) != 4:
            raise ValueError("IPv4 addresses are 4 bytes")
        if not (0 <= self.dscp <= 63 and 0 <= self.ecn <= 3):
            raise ValueError("DSCP is 6 bits, ECN 2 bits")
        if offset < 0 or len(buf) < offset + hlen:
            raise ValueError(f"buffer too small for a {hlen}-byte IPv4 header at {offset}")
        flags_frag = (
            (0x4000 if self.flags_df else 0) | (0x2000 if self.flags_mf else 0) | (self.frag_offset >> 3)
        )
        _FIXED.pack_into(
            buf, offset,
            (VERSION << 4) | (hlen >> 2),
            (self.dscp << 2) | self.ecn,
            self.total_length, self.ident, flags_frag, self.ttl, self.proto, 0,
            self.src, self.dst,
        )
        opt_end = offset + MIN_HEADER_LEN + len(self.options)
        buf[offset + MIN_HEADER_LEN : opt_end] = self.options
        buf[opt_end : offset + hlen] = b"\0" * (offset + hlen - opt_end)
        csum = internet_checksum(memoryview(buf)[offset : offset + hlen])
        _CHECKSUM.pack_into(buf, offset + 10, csum)
        return hlen
