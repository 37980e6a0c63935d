"""Ethernet II header (IEEE 802.3 framing as used by RFC 894), with one optional 802.1Q tag.

``EthernetHeader.parse(buf)`` reads the destination and source addresses and
the EtherType; when the EtherType is 0x8100 (IEEE 802.1Q) the tag is recorded
(``vlan_id``, ``vlan_pcp``, ``vlan_dei``), ``ethertype`` is the inner one and
the header is 18 bytes long. Only one tag is understood: an inner 0x8100
(or an 802.1ad 0x88a8 outer tag) is reported as the EtherType and left to
the caller to drop. The frame check sequence is never part of the buffer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ustack.wire import WireError

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_ARP = 0x0806
ETHERTYPE_VLAN = 0x8100
ETHERTYPE_IPV6 = 0x86DD

HEADER_LEN = 14
VLAN_HEADER_LEN = 18
# Minimum frame without the 4-byte FCS; shorter frames are padded by the sender.
MIN_FRAME_LEN = 60

BROADCAST = b"\xff" * 6

_HEADER = struct.Struct("!6s6sH")
_TAG = struct.Struct("!HH")


def mac_to_bytes(text: str) -> bytes:
    """``"02:00:00:00:00:01"`` (or with ``-``) -> 6 bytes. Raises ValueError on anything else."""
    parts = text.replace("-", ":").split(":")
    if len(parts) != 6 or not all(1 <= len(p) <= 2 for p in parts):
        raise ValueError(f"not a MAC address: {text!r}")
    return bytes(int(p, 16) for p in parts)


def bytes_to_mac(mac) -> str:
    """6 bytes -> ``"02:00:00:00:00:01"``."""
    return ":".join(f"{b:02x}" for b in bytes(mac))


@dataclass(frozen=True, slots=True)
class EthernetHeader:
    """An Ethernet II header. ``dst``/``src`` are 6-byte ``bytes``.

    ``vlan_id`` is None for an untagged frame; otherwise the 12-bit VLAN
    identifier of the single 802.1Q tag, with its priority (``vlan_pcp``)
    and drop-eligible bit (``vlan_dei``).
    """

    dst: bytes
    src: bytes
    ethertype: int
    vlan_id: int | None = None
    vlan_pcp: int = 0
    vlan_dei: bool = False

    @property
    def header_len(self) -> int:
        return HEADER_LEN if self.vlan_id is None else VLAN_HEADER_LEN

    @property
    def length(self) -> int:
        """Bytes ``emit`` writes (same as ``header_len``)."""
        return self.header_len

    @classmethod
    def parse(cls, buf) -> EthernetHeader:
        n = len(buf)
        if n < HEADER_LEN:
            raise WireError("eth.truncated", f"{n} bytes")
        dst, src, ethertype = _HEADER.unpack_from(buf, 0)
        if ethertype != ETHERTYPE_VLAN:
            return cls(dst, src, ethertype)
        if n < VLAN_HEADER_LEN:
            raise WireError("eth.truncated", f"802.1Q tag in {n} bytes")
        tci, inner = _TAG.unpack_from(buf, HEADER_LEN)
        return cls(dst, src, inner, tci & 0x0FFF, tci >> 13, bool(tci & 0x1000))

    def emit(self, buf, offset: int = 0) -> int:
        """Write the header at ``offset``; returns the number of bytes written."""
        n = self.header_len
        if len(self.dst) != 6 or len(self.src) != 6:
            raise ValueError("Ethernet addresses are 6 bytes")
        if offset < 0 or len(buf) < offset + n:
            raise ValueError(f"buffer too small for a {n}-byte Ethernet header at {offset}")
        if self.vlan_id is None:
            _HEADER.pack_into(buf, offset, self.dst, self.src, self.ethertype)
        else:
            if not (0 <= self.vlan_id <= 0x0FFF and 0 <= self.vlan_pcp <= 7):
                raise ValueError("VLAN id is 12 bits, priority 3 bits")
            tci = (self.vlan_pcp << 13) | (0x1000 if self.vlan_dei else 0) | self.vlan_id
            _HEADER.pack_into(buf, offset, self.dst, self.src, ETHERTYPE_VLAN)
            _TAG.pack_into(buf, offset + HEADER_LEN, tci, self.ethertype)
        return n
