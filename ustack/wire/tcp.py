"""TCP header with options (RFC 9293 3.1; MSS, window scale and timestamps RFC 7323; SACK RFC 2018).

``TcpHeader.parse(buf, src, dst)`` takes the TCP segment (the IP payload,
header + data) and validates, in this order: length (``tcp.truncated``), data
offset (``tcp.bad_data_offset``), checksum over the IPv4 pseudo-header
(``tcp.bad_checksum``) and the option list (``tcp.bad_options``). The data
starts at ``hdr.header_len``.

Options are parsed into fields (``mss``, ``wscale``, ``sack_permitted``,
``sack_blocks``, ``timestamps``); options of other kinds are kept as
``(kind, data)`` pairs in ``unknown_options``. A known option with the wrong
length is ``tcp.bad_options``, as is a length octet that is missing, below 2
or running past the header. ``emit`` writes the options in the order Linux
uses for a SYN (MSS, SACK-permitted + timestamps, window scale), aligned with
NOPs, and pads the list to a multiple of 4 octets with EOL.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ustack.wire import WireError
from ustack.wire.checksum import ones_sum, pseudo_header_sum
from ustack.wire.proto import PROTO_TCP

HEADER_LEN = 20
MAX_HEADER_LEN = 60
MAX_OPTIONS_LEN = MAX_HEADER_LEN - HEADER_LEN

# Control bits (RFC 9293 3.1, RFC 3168 for ECE/CWR).
FIN = 0x01
SYN = 0x02
RST = 0x04
PSH = 0x08
ACK = 0x10
URG = 0x20
ECE = 0x40
CWR = 0x80

# Option kinds.
OPT_EOL = 0
OPT_NOP = 1
OPT_MSS = 2
OPT_WSCALE = 3
OPT_SACK_PERMITTED = 4
OPT_SACK = 5
OPT_TIMESTAMPS = 8

_FLAG_LETTERS = (("F", FIN), ("S", SYN), ("R", RST), ("P", PSH), ("A", ACK), ("U", URG), ("E", ECE), ("C", CWR))

_HEADER = struct.Struct("!HHIIBBHHH")
_CHECKSUM = struct.Struct("!H")
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_TS = struct.Struct("!II")


def flags_from_str(text: str) -> int:
    """``"SA"`` -> SYN|ACK (letters F S R P A U E C, the way scapy and tcpdump write them)."""
    value = 0
    for ch in text:
        for letter, bit in _FLAG_LETTERS:
            if ch == letter:
                value |= bit
                break
        else:
            raise ValueError(f"unknown TCP flag letter {ch!r}")
    return value


def flags_to_str(flags: int) -> str:
    """SYN|ACK -> ``"SA"``."""
    return "".join(letter for letter, bit in _FLAG_LETTERS if flags & bit)


def _parse_options(mv: memoryview, end: int) -> dict:
    """Walk the option list in ``mv[20:end]`` (RFC 9293 3.2)."""
    found: dict = {}
    unknown = []
    i = HEADER_LEN
    while i < end:
        kind = mv[i]
        if kind == OPT_EOL:
            break
        if kind == OPT_NOP:
            i += 1
            continue
        if i + 1 >= end:
            raise WireError("tcp.bad_options", f"option {kind} has no length octet")
        olen = mv[i + 1]
        if olen < 2 or i + olen > end:
            raise WireError("tcp.bad_options", f"option {kind} length {olen}")
        if kind == OPT_MSS:
            if olen != 4:
                raise WireError("tcp.bad_options", f"MSS length {olen}")
            found["mss"] = _U16.unpack_from(mv, i + 2)[0]
        elif kind == OPT_WSCALE:
            if olen != 3:
                raise WireError("tcp.bad_options", f"window scale length {olen}")
            found["wscale"] = mv[i + 2]
        elif kind == OPT_SACK_PERMITTED:
            if olen != 2:
                raise WireError("tcp.bad_options", f"SACK-permitted length {olen}")
            found["sack_permitted"] = True
        elif kind == OPT_SACK:
            if olen < 10 or (olen - 2) % 8:
                raise WireError("tcp.bad_options", f"SACK length {olen}")
            found["sack_blocks"] = tuple(_TS.unpack_from(mv, j) for j in range(i + 2, i + olen, 8))
        elif kind == OPT_TIMESTAMPS:
            if olen != 10:
                raise WireError("tcp.bad_options", f"timestamps length {olen}")
            found["timestamps"] = _TS.unpack_from(mv, i + 2)
        else:
            unknown.append((kind, bytes(mv[i + 2 : i + olen])))
        i += olen
    if unknown:
        found["unknown_options"] = tuple(unknown)
    return found


@dataclass(frozen=True, slots=True)
class TcpHeader:
    """A TCP header and its options.

    ``header_len`` is the data offset in bytes: from the wire for a parsed
    header, what ``emit`` will write for a constructed one. ``sack_blocks`` is
    a tuple of ``(left, right)`` edges; ``timestamps`` is ``(tsval, tsecr)``.
    ``checksum`` is what was on the wire; ``emit`` always computes it.
    """

    src_port: int
    dst_port: int
    seq: int = 0
    ack: int = 0
    flags: int = 0
    window: int = 0
    checksum: int = 0
    urgent: int = 0
    mss: int | None = None
    wscale: int | None = None
    sack_permitted: bool = False
    sack_blocks: tuple = ()
    timestamps: tuple | None = None
    unknown_options: tuple = ()
    header_len: int = field(default=0, compare=False)

    def __post_init__(self):
        if not self.header_len:
            object.__setattr__(self, "header_len", HEADER_LEN + len(self.options_bytes()))

    # -- parse -----------------------------------------------------------

    @classmethod
    def parse(cls, buf, src, dst, verify_checksum: bool = True) -> TcpHeader:
        """Validate and parse a segment; ``src``/``dst`` are the 4-byte IPv4 addresses (pseudo-header)."""
        mv = memoryview(buf)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        n = len(mv)
        if n < HEADER_LEN:
            raise WireError("tcp.truncated", f"{n} bytes")
        src_port, dst_port, seq, ack, offset_byte, flags, window, checksum, urgent = _HEADER.unpack_from(mv, 0)
        header_len = (offset_byte >> 4) * 4
        if header_len < HEADER_LEN or header_len > n:
            raise WireError("tcp.bad_data_offset", f"data offset {header_len} bytes, segment {n} bytes")
        if verify_checksum and ones_sum(mv, pseudo_header_sum(src, dst, PROTO_TCP, n)) != 0xFFFF:
            raise WireError("tcp.bad_checksum", f"checksum {checksum:#06x}")
        opts = _parse_options(mv, header_len) if header_len > HEADER_LEN else {}
        return cls(src_port, dst_port, seq, ack, flags, window, checksum, urgent, header_len=header_len, **opts)

    # -- emit ------------------------------------------------------------

    def options_bytes(self) -> bytes:
        """The option list as ``emit`` writes it, padded to a multiple of 4 octets."""
        out = bytearray()
        if self.mss is not None:
            out += bytes((OPT_MSS, 4)) + _U16.pack(self.mss)
        if self.timestamps is not None:
            if self.sack_permitted:
                out += bytes((OPT_SACK_PERMITTED, 2))
            else:
                out += bytes((OPT_NOP, OPT_NOP))
            out += bytes((OPT_TIMESTAMPS, 10)) + _TS.pack(*self.timestamps)
        elif self.sack_permitted:
            out += bytes((OPT_NOP, OPT_NOP, OPT_SACK_PERMITTED, 2))
        if self.wscale is not None:
            out += bytes((OPT_NOP, OPT_WSCALE, 3, self.wscale))
        if self.sack_blocks:
            out += bytes((OPT_NOP, OPT_NOP, OPT_SACK, 2 + 8 * len(self.sack_blocks)))
            for left, right in self.sack_blocks:
                out += _TS.pack(left, right)
        for kind, data in self.unknown_options:
            out += bytes((kind, 2 + len(data))) + bytes(data)
        out += bytes(-len(out) % 4)  # EOL padding
        if len(out) > MAX_OPTIONS_LEN:
            raise WireError("tcp.bad_options", f"{len(out)} bytes of options do not fit in 40")
        return bytes(out)

    def emit(self, buf, offset: int, src, dst, payload_len: int) -> int:
        """Write header + options at ``offset`` and the checksum over them and the
        ``payload_len`` bytes of data already in place after the header; returns the header length."""
        opts = self.options_bytes()
        header_len = HEADER_LEN + len(opts)
        end = offset + header_len + payload_len
        if offset < 0 or payload_len < 0 or len(buf) < end:
            raise ValueError(f"buffer too small for a {header_len}+{payload_len}-byte TCP segment at {offset}")
        _HEADER.pack_into(
            buf, offset, self.src_port, self.dst_port, self.seq & 0xFFFFFFFF, self.ack & 0xFFFFFFFF,
            (header_len // 4) << 4, self.flags & 0xFF, self.window, 0, self.urgent,
        )
        buf[offset + HEADER_LEN : offset + header_len] = opts
        with memoryview(buf) as mv:
            csum = (~ones_sum(mv[offset:end], pseudo_header_sum(src, dst, PROTO_TCP, end - offset))) & 0xFFFF
        _CHECKSUM.pack_into(buf, offset + 16, csum)
        return header_len

    def to_bytes(self, src, dst, payload=b"") -> bytes:
        """The whole segment (header, options, ``payload``) with its checksum."""
        buf = bytearray(self.header_len + len(payload))
        buf[self.header_len :] = payload
        self.emit(buf, 0, src, dst, len(payload))
        return bytes(buf)

    @property
    def flag_str(self) -> str:
        return flags_to_str(self.flags)


def headers_len(addr: bytes) -> int:
    """IP + TCP headers without options toward ``addr``: 40 over IPv4, 60 over IPv6 (MSS = MTU - this)."""
    return 60 if len(addr) == 16 else 40
