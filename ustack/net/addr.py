"""The one address type of the stack: packed bytes, 4 long for IPv4, 16 for IPv6.

An address is the ``bytes`` the wire carries, in network order (what
``socket.inet_pton`` returns). That choice is made for the hot path:

- a ``bytes`` object caches its hash, so it is the cheapest dict key for
  the demux tables (4-tuples, listeners, ARP/NDP caches);
- the length tells the family apart (no ``::c612:1`` vs ``198.18.0.1``
  confusion that plain integers would have);
- header emit and the checksum pseudo-header take it as it is, with no
  conversion, and ``ipaddress.ip_address(a)`` accepts it directly.

Text is converted only at the edges (sockets, the command line) with
``parse`` / ``to_str``. ``Prefix`` is a connected subnet (address/length)
with the tests routing needs.
"""

from __future__ import annotations

import socket

ANY4 = bytes(4)
ANY6 = bytes(16)
BROADCAST4 = b"\xff\xff\xff\xff"
LOOPBACK4 = b"\x7f\x00\x00\x01"


def parse(addr) -> bytes:
    """'198.18.0.1' / 'fd00::1' / packed bytes / an ``ipaddress`` object -> packed bytes.

    Raises ValueError for anything else (a host name included: resolving is the caller's job).
    """
    if isinstance(addr, bytes):
        if len(addr) in (4, 16):
            return addr
        raise ValueError(f"a packed address is 4 or 16 bytes, not {len(addr)}")
    if isinstance(addr, (bytearray, memoryview)):
        return parse(bytes(addr))
    if isinstance(addr, str):
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        try:
            return socket.inet_pton(family, addr)
        except OSError:
            raise ValueError(f"not an IP address: {addr!r}") from None
    packed = getattr(addr, "packed", None)  # ipaddress.IPv4Address / IPv6Address
    if isinstance(packed, bytes):
        return packed
    raise ValueError(f"not an IP address: {addr!r}")


def to_str(addr: bytes) -> str:
    """Packed bytes -> '198.18.0.1' / 'fd00::1'."""
    return socket.inet_ntop(socket.AF_INET if len(addr) == 4 else socket.AF_INET6, addr)


def family(addr: bytes) -> int:
    """socket.AF_INET or socket.AF_INET6."""
    return socket.AF_INET if len(addr) == 4 else socket.AF_INET6


def is_any(addr: bytes) -> bool:
    """The unspecified address (0.0.0.0 or ::)."""
    return addr == ANY4 or addr == ANY6


def is_multicast(addr: bytes) -> bool:
    """224.0.0.0/4 (RFC 1112) or ff00::/8 (RFC 4291)."""
    return (addr[0] & 0xF0) == 0xE0 if len(addr) == 4 else addr[0] == 0xFF


def to_int(addr: bytes) -> int:
    return int.from_bytes(addr, "big")


def from_int(value: int, length: int = 4) -> bytes:
    return value.to_bytes(length, "big")


class Prefix:
    """A connected subnet: ``Prefix("198.18.0.2/24")`` keeps the host address, length and mask."""

    __slots__ = ("addr", "length", "network", "broadcast", "_mask", "_net")

    def __init__(self, text: str):
        if "/" not in text:
            raise ValueError("address must be given as ADDRESS/PREFIXLEN")
        a, n = text.split("/", 1)
        self.addr = parse(a)
        bits = 8 * len(self.addr)
        try:
            self.length = int(n)
        except ValueError:
            raise ValueError(f"bad prefix length {n!r}") from None
        if not 0 < self.length <= bits:
            raise ValueError(f"prefix length must be 1..{bits}")
        self._mask = ((1 << bits) - 1) ^ ((1 << (bits - self.length)) - 1)
        self._net = to_int(self.addr) & self._mask
        self.network = from_int(self._net, len(self.addr))
        # IPv4 only: the directed broadcast of the subnet (IPv6 has none).
        self.broadcast = from_int(self._net | (~self._mask & 0xFFFFFFFF), 4) if bits == 32 else None

    def contains(self, addr: bytes) -> bool:
        return len(addr) == len(self.addr) and (to_int(addr) & self._mask) == self._net

    def __str__(self) -> str:
        return f"{to_str(self.addr)}/{self.length}"
