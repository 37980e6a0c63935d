"""The loopback interface's neighbours: every next hop is the interface itself (no ARP, no ND).

A loopback link (Linux's ``lo``) delivers what it sends back to its own
receive side, so there is nobody to ask for a hardware address: the
answer to every lookup is the interface's own MAC, at once. ``LoopbackNeighbours``
stands where ``ArpLayer`` (IPv4) and ``NdpLayer`` (IPv6) stand on an
Ethernet interface, with the calls the IP layers, the Stack and the
snapshot make of them. An ARP or NDP message arriving on a loopback
interface can only be one we did not send: it is dropped and counted
(``arp.loopback`` / ``ndp.loopback``).
"""

from __future__ import annotations

from typing import Callable, Optional

from ustack import _fastpath
from ustack.stats import Stats


class LoopbackNeighbours:
    """Neighbour resolution on a loopback link: always our own MAC."""

    __slots__ = ("mac", "stats", "reason", "cache", "cur_hop_limit", "gen")

    def __init__(self, mac: bytes, stats: Stats, reason: str):
        self.mac = bytes(mac)
        self.stats = stats
        self.reason = reason  # the drop reason of a resolution message received here
        self.cache: dict = {}  # never grows: the snapshot and tools read an empty cache
        self.cur_hop_limit: Optional[int] = None  # no Router Advertisements on a loopback link
        # What validates per-flow frame templates (as ArpLayer.gen): with the cache always empty the IP
        # layer never builds one here, and loopback flows take the general emit
        self.gen = _fastpath.Generation()

    def lookup(self, ip: bytes, now: float) -> bytes:
        return self.mac

    def resolve_then(self, ip: bytes, send: Callable[[bytes], None], now: float) -> None:
        send(self.mac)

    def learn(self, ip: bytes, mac: bytes, now: float) -> None:
        pass  # nothing to learn: every neighbour is us

    def entries(self, now: float) -> list:
        return []

    def announce(self) -> None:
        pass  # no gratuitous ARP on a link nobody else is on

    def start(self, now: float) -> None:
        pass  # no DAD (RFC 4862 5.4: not on interfaces that do not need it), no router solicitation

    def input(self, *args) -> None:
        self.stats.drop(self.reason)
