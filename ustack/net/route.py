"""The interface's IPv4 addressing and routing: one connected subnet plus a default gateway.

Addresses are packed bytes (``ustack.net.addr``). ``next_hop`` is the
routing decision of RFC 1122 section 3.3.1: on-link destinations directly,
everything else through the gateway, or ENETUNREACH when there is none.
An IPv6-only stack has an unnumbered interface (``addr`` None): nothing is
local to it, only the wildcard may be bound, and every route is ENETUNREACH.
"""

from __future__ import annotations

import errno
from typing import Optional

from ustack.net.addr import ANY4, BROADCAST4, Prefix, parse


class Interface:
    """Our one IPv4 interface: address/prefix, MAC, MTU, gateway."""

    __slots__ = ("mac", "mtu", "prefix", "addr", "prefixlen", "broadcast", "gateway", "_local")

    def __init__(self, mac: bytes, addr: Optional[str], mtu: int, gateway: Optional[str] = None):
        self.mac = bytes(mac)
        self.mtu = mtu
        if addr is None:  # unnumbered: an IPv6-only stack
            if gateway:
                raise ValueError("an IPv4 gateway needs an IPv4 address")
            self.prefix = self.addr = self.broadcast = self.gateway = None
            self.prefixlen = 0
            self._local = frozenset()
            return
        self.prefix = Prefix(addr)
        if len(self.prefix.addr) != 4:
            raise ValueError("the interface address must be IPv4 (A.B.C.D/N)")
        self.addr = self.prefix.addr
        self.prefixlen = self.prefix.length
        self.broadcast = self.prefix.broadcast
        self.gateway = parse(gateway) if gateway else None
        if self.gateway is not None and not self.prefix.contains(self.gateway):
            raise ValueError("the gateway must be inside the connected subnet")
        self._local = frozenset((self.addr, self.broadcast, BROADCAST4))

    def __str__(self) -> str:
        return str(self.prefix) if self.prefix is not None else "(no IPv4 address)"

    def is_local_dest(self, dst: bytes) -> bool:
        """Addressed to us: our unicast address, our subnet broadcast or the limited broadcast."""
        return dst in self._local

    def is_broadcast(self, dst: bytes) -> bool:
        return dst == BROADCAST4 or (dst == self.broadcast and dst is not None)

    def is_ours(self, addr: bytes) -> bool:
        """A local address a socket may bind: ours or the wildcard."""
        return addr == self.addr or addr == ANY4

    def next_hop(self, dst: bytes) -> bytes:
        """The neighbour to hand a packet for ``dst`` to (RFC 1122 section 3.3.1)."""
        if self.prefix is None:
            raise OSError(errno.ENETUNREACH, "Network is unreachable (no IPv4 address on this stack)")
        if dst == BROADCAST4 or self.prefix.contains(dst):
            return dst
        if self.gateway is None:
            raise OSError(errno.ENETUNREACH, "Network is unreachable (no route and no default gateway)")
        return self.gateway
