"""The interface's IPv4 addressing and routing: one connected subnet plus a default gateway.

Addresses are packed bytes (``ustack.net.addr``). ``next_hop`` is the
routing decision of RFC 1122 section 3.3.1: on-link destinations directly,
everything else through the gateway, or ENETUNREACH when there is none.
An IPv6-only stack has an unnumbered interface (``addr`` None): nothing is
local to it, only the wildcard may be bound, and every route is ENETUNREACH.
A loopback interface (``own_prefix()``, Linux's ``local 127.0.0.0/8 dev lo``
route) owns its whole prefix: every address of 127/8 but the broadcast is
ours to bind and to receive on, while the source we pick stays the
interface address (127.0.0.1, the route's ``src``).
"""

from __future__ import annotations

import errno
from typing import Optional

from ustack.net.addr import ANY4, BROADCAST4, Prefix, parse


class Interface:
    """Our one IPv4 interface: address/prefix, MAC, MTU, gateway."""

    __slots__ = ("mac", "mtu", "prefix", "addr", "prefixlen", "broadcast", "gateway", "_local", "whole_prefix")

    def __init__(self, mac: bytes, addr: Optional[str], mtu: int, gateway: Optional[str] = None):
        self.mac = bytes(mac)
        self.mtu = mtu
        self.whole_prefix = False  # own_prefix(): every address of the subnet is ours (a loopback interface)
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

    def own_prefix(self) -> None:
        """Own every address of the subnet, as Linux's ``lo`` owns 127.0.0.0/8 (its ``local`` route):
        any of them may be bound and is delivered here; the subnet broadcast stays a broadcast."""
        if self.prefix is None:
            raise ValueError("an unnumbered interface has no prefix to own")
        self.whole_prefix = True

    def owns(self, a: bytes) -> bool:
        """A unicast address of ours: the interface address, or (``own_prefix``) any of its subnet's."""
        if a == self.addr:
            return True
        return self.whole_prefix and a != self.broadcast and self.prefix.contains(a)

    def is_local_dest(self, dst: bytes) -> bool:
        """Addressed to us: our unicast address(es), our subnet broadcast or the limited broadcast."""
        return dst in self._local or (self.whole_prefix and self.prefix.contains(dst))

    def is_broadcast(self, dst: bytes) -> bool:
        return dst == BROADCAST4 or (dst == self.broadcast and dst is not None)

    def is_ours(self, addr: bytes) -> bool:
        """A local address a socket may bind: ours or the wildcard."""
        return addr == self.addr or addr == ANY4 or (self.whole_prefix and self.owns(addr))

    def next_hop(self, dst: bytes) -> bytes:
        """The neighbour to hand a packet for ``dst`` to (RFC 1122 section 3.3.1)."""
        if self.prefix is None:
            raise OSError(errno.ENETUNREACH, "Network is unreachable (no IPv4 address on this stack)")
        if dst == BROADCAST4 or self.prefix.contains(dst):
            return dst
        if self.gateway is None:
            raise OSError(errno.ENETUNREACH, "Network is unreachable (no route and no default gateway)")
        return self.gateway
