"""The interface's addressing and routing: one connected subnet plus a default gateway.

Addresses are kept as host-order integers inside the stack (dict keys and
comparisons are cheapest that way) and converted at the edges.
"""

from __future__ import annotations

import errno
import socket
from typing import Optional

LIMITED_BROADCAST = 0xFFFFFFFF


def ip_int(addr) -> int:
    """'198.18.0.1' / b'\\xc6\\x12\\x00\\x01' / int -> int."""
    if isinstance(addr, int):
        return addr
    if isinstance(addr, (bytes, bytearray, memoryview)):
        if len(addr) != 4:
            raise ValueError("an IPv4 address is 4 bytes")
        return int.from_bytes(addr, "big")
    try:
        return int.from_bytes(socket.inet_aton(addr), "big")
    except OSError:
        raise ValueError(f"not an IPv4 address: {addr!r}") from None


def ip_str(addr: int) -> str:
    return socket.inet_ntoa(addr.to_bytes(4, "big"))


class Interface:
    """Our one interface: address/prefix, MAC, MTU, gateway."""

    def __init__(self, mac: bytes, addr: str, mtu: int, gateway: Optional[str] = None):
        if "/" not in addr:
            raise ValueError("address must be given as A.B.C.D/N")
        a, n = addr.split("/", 1)
        self.prefixlen = int(n)
        if not 0 < self.prefixlen <= 32:
            raise ValueError("prefix length must be 1..32")
        self.addr = ip_int(a)
        self.addr_bytes = self.addr.to_bytes(4, "big")
        self.netmask = (0xFFFFFFFF << (32 - self.prefixlen)) & 0xFFFFFFFF
        self.network = self.addr & self.netmask
        self.broadcast = self.network | (~self.netmask & 0xFFFFFFFF)
        self.gateway = ip_int(gateway) if gateway else None
        if self.gateway is not None and (self.gateway & self.netmask) != self.network:
            raise ValueError("the gateway must be inside the connected subnet")
        self.mac = bytes(mac)
        self.mtu = mtu

    def is_local_dest(self, dst: int) -> bool:
        """Addressed to us: our unicast address, our subnet broadcast or the limited broadcast."""
        return dst == self.addr or dst == self.broadcast or dst == LIMITED_BROADCAST

    def next_hop(self, dst: int) -> int:
        """The neighbour to hand a packet for ``dst`` to (RFC 1122 section 3.3.1)."""
        if (dst & self.netmask) == self.network or dst == LIMITED_BROADCAST:
            return dst
        if self.gateway is None:
            raise OSError(errno.ENETUNREACH, "Network is unreachable (no route and no default gateway)")
        return self.gateway

    def is_broadcast(self, dst: int) -> bool:
        return dst == self.broadcast or dst == LIMITED_BROADCAST
