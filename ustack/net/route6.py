"""The interface's IPv6 addressing and routing: addresses with their DAD state, on-link prefixes,
default routers, multicast groups, next hop and source address selection.

Addresses are packed 16-byte ``bytes`` (``ustack.net.addr``). Each unicast
address is ``TENTATIVE`` until duplicate address detection passes
(RFC 4862 5.4, run by ``ustack.net.ndp``), then ``PREFERRED``; a duplicate
is ``DUPLICATE`` and never used. A SLAAC or temporary address (RFC 4862,
RFC 8981: ``ustack.net.slaac``, ``ustack.net.tempaddr``) past its preferred lifetime is ``DEPRECATED``
(RFC 4862 5.5.4): still valid, so it receives packets and keeps the
connections that use it, but new ones choose another source. Only valid
(preferred or deprecated) addresses receive packets; a tentative one still
sees Neighbor Solicitations/Advertisements for itself (that is how DAD
hears a conflict).

Multicast groups joined (RFC 4291 2.7.1, RFC 4861 7.2.1): all-nodes
(ff02::1) and the solicited-node group of every unicast address, tentative
ones included. A frame to a multicast MAC (33:33:xx:xx:xx:xx, RFC 2464 7)
is accepted only when it maps a group we joined and carries that group as
its IPv6 destination (``accepts_multicast``).

Routing (RFC 4861 5.2, simplified): the destination cache first (the next
hops Redirects taught, RFC 4861 8.3, each kept ``redirect_lifetime`` seconds,
at most ``MAX_REDIRECTS``, the oldest evicted); then link-local and multicast destinations
and those inside an on-link prefix (our configured prefixes, and prefixes
a Router Advertisement marked on-link while their lifetime lasts) are sent
directly; anything else goes to the first default router still alive
(configured ``gateway``, or learned from RAs), else ENETUNREACH.

Source selection (RFC 6724, simplified to the rules that matter on one
interface): a link-local or link-scoped multicast destination gets the
link-local address (rule 2, scope); otherwise among the valid global
addresses: a preferred one before a deprecated one (rule 3), a temporary one
before a public one when ``prefer_temporary`` (rule 7, Linux's
use_tempaddr=2), then the longest prefix in common with the destination
(rule 8); the link-local address only when no global address exists.
"""

from __future__ import annotations

import errno
from typing import Optional

from ustack import _fastpath
from ustack.net.addr import Prefix, to_int

TENTATIVE = "tentative"
PREFERRED = "preferred"
DEPRECATED = "deprecated"
DUPLICATE = "duplicate"
VALID_STATES = frozenset((PREFERRED, DEPRECATED))

ALL_NODES = bytes.fromhex("ff020000000000000000000000000001")
ALL_ROUTERS = bytes.fromhex("ff020000000000000000000000000002")
LINK_LOCAL_PREFIX = bytes.fromhex("fe80000000000000")
_SOLICITED_PREFIX = bytes.fromhex("ff0200000000000000000001ff")
MAX_ONLINK = 16  # prefixes learned from RAs (remote traffic cannot push past it)
MAX_ROUTERS = 8  # default routers learned from RAs
MAX_REDIRECTS = 1024  # destination cache entries made by Redirects
MAX_CACHED_HOPS = 1024  # next-hop decisions remembered (cleared whole when full)
INF = float("inf")


def is_link_local(addr: bytes) -> bool:
    """fe80::/10 (RFC 4291 2.5.6)."""
    return addr[0] == 0xFE and (addr[1] & 0xC0) == 0x80


def solicited_node(addr: bytes) -> bytes:
    """ff02::1:ffXX:XXXX, from the low 24 bits of ``addr`` (RFC 4291 2.7.1)."""
    return _SOLICITED_PREFIX + addr[13:16]


def multicast_mac(group: bytes) -> bytes:
    """33:33 and the low 32 bits of the group (RFC 2464 section 7)."""
    return b"\x33\x33" + group[12:16]


class Address:
    __slots__ = ("addr", "prefix", "state", "origin", "dad_timer", "dad_sent", "valid_until", "preferred_until",
                 "regenerated", "attempt")

    def __init__(self, prefix: Prefix, state: str, origin: str):
        self.addr = prefix.addr
        self.prefix = prefix
        self.state = state
        self.origin = origin  # "static", "link-local", "slaac" or "temporary"
        self.dad_timer = None
        self.dad_sent = 0
        # Lifetimes (absolute times; None: forever). SLAAC addresses (ustack.net.slaac) and
        # temporary ones (ustack.net.tempaddr) have them.
        self.valid_until: Optional[float] = None
        self.preferred_until: Optional[float] = None
        self.regenerated = False  # a temporary address whose successor was made (RFC 8981 3.5)
        self.attempt = 0  # DAD attempts behind a temporary address's identifier (RFC 8981 3.4, TEMP_IDGEN_RETRIES)

    @property
    def temporary(self) -> bool:
        return self.origin == "temporary"


class Interface6:
    """Our one interface's IPv6 side: addresses, prefixes, routers, groups."""

    def __init__(self, mac: bytes, mtu: int, gateway: Optional[bytes] = None):
        self.mac = bytes(mac)
        self.link_mtu = mtu  # the device's
        self.mtu = mtu  # the link MTU in use (a Router Advertisement may lower it, RFC 4861 6.3.4)
        self.addresses: dict[bytes, Address] = {}
        self.static_prefixes: list[Prefix] = []
        self.onlink: dict[tuple[bytes, int], tuple[Prefix, float]] = {}  # learned: (network, length) -> expiry
        self.routers: dict[bytes, float] = {}  # learned default routers -> expiry
        self.redirects: dict[bytes, tuple[bytes, float]] = {}  # destination -> (next hop, expiry), RFC 4861 8.3
        self._gateway = gateway
        self.groups: set[bytes] = {ALL_NODES}
        self.preferred_set: frozenset = frozenset()  # the preferred unicast addresses (replaced on change)
        self.valid_set: frozenset = frozenset()  # preferred or deprecated: ours to receive on (replaced on change)
        self.prefer_temporary = False  # RFC 6724 rule 7 (set by NDP with use_tempaddr=2)
        self._macs: frozenset = frozenset((multicast_mac(ALL_NODES),))
        # What validates per-flow frame templates (_fp_tmpl.pxi): bumped when a route changes here, and by NDP
        # when a neighbour entry changes (templates copy the next hop's MAC).
        self.gen = _fastpath.Generation()
        self._hops: dict[bytes, tuple[bytes, float, int]] = {}  # destination -> (next hop, until, gen value)

    @property
    def gateway(self) -> Optional[bytes]:
        """The configured default router (None: only routers learned from RAs)."""
        return self._gateway

    @gateway.setter
    def gateway(self, router: Optional[bytes]) -> None:
        self._gateway = router
        self.gen.bump()  # a route change: next-hop decisions and frame templates are remade

    # -- addresses ----------------------------------------------------------
    def add(self, prefix: Prefix, origin: str, state: str = TENTATIVE) -> Address:
        entry = Address(prefix, state, origin)
        self.addresses[prefix.addr] = entry
        if origin == "static":
            self.static_prefixes.append(prefix)
            self.gen.bump()  # a new on-link prefix
        self._changed()
        return entry

    def set_state(self, addr: bytes, state: str) -> None:
        self.addresses[addr].state = state
        self._changed()

    def remove(self, addr: bytes) -> None:
        """An address whose valid lifetime ended (RFC 4862 5.5.4): gone, its solicited-node group too."""
        entry = self.addresses.pop(addr, None)
        if entry is not None and entry.dad_timer is not None:
            entry.dad_timer.cancel()
        self._changed()

    def _changed(self) -> None:
        self.preferred_set = frozenset(a for a, e in self.addresses.items() if e.state == PREFERRED)
        self.valid_set = frozenset(a for a, e in self.addresses.items() if e.state in VALID_STATES)
        self.groups = {ALL_NODES} | {solicited_node(a) for a, e in self.addresses.items() if e.state != DUPLICATE}
        self._macs = frozenset(multicast_mac(g) for g in self.groups)

    @property
    def link_local(self) -> Optional[bytes]:
        for a, e in self.addresses.items():
            if e.state == PREFERRED and is_link_local(a):
                return a
        return None

    def preferred(self) -> frozenset:
        return self.preferred_set

    def valid(self) -> frozenset:
        return self.valid_set

    def is_local_dest(self, dst: bytes) -> bool:
        """Addressed to us: a valid (preferred or deprecated) address of ours or a group we joined."""
        return dst in self.valid_set or dst in self.groups

    def is_ours(self, addr: bytes) -> bool:
        """A local address a socket may bind: a valid address of ours (a deprecated one too, as Linux)."""
        return addr in self.valid_set

    def accepts_multicast(self, dst_mac: bytes, dst: bytes) -> bool:
        """RFC 2464 7: a multicast frame maps the group it is addressed to, and we joined it."""
        return dst_mac in self._macs and dst in self.groups and multicast_mac(dst) == bytes(dst_mac)

    # -- routing -------------------------------------------------------------
    def on_link(self, dst: bytes, now: float) -> bool:
        if is_link_local(dst) or dst[0] == 0xFF:
            return True
        for p in self.static_prefixes:
            if p.contains(dst):
                return True
        for p, expires in self.onlink.values():
            if expires > now and p.contains(dst):
                return True
        return False

    def next_hop(self, dst: bytes, now: float) -> bytes:
        """The next hop to ``dst`` (itself when on-link); ENETUNREACH without a route."""
        hit = self._hops.get(dst)
        if hit is not None and now < hit[1] and hit[2] == self.gen.value:
            return hit[0]
        return self._route(dst, now)[0]

    def next_hop_until(self, dst: bytes, now: float) -> tuple[bytes, float]:
        """``next_hop`` and until when that answer holds by time alone (the redirect's, on-link prefix's or
        router's lifetime; inf for configured routes). A change of the tables bumps ``gen`` instead."""
        hit = self._hops.get(dst)
        if hit is not None and now < hit[1] and hit[2] == self.gen.value:
            return hit[0], hit[1]
        return self._route(dst, now)

    def _route(self, dst: bytes, now: float) -> tuple[bytes, float]:
        """RFC 4861 5.2 (simplified, see the module docstring): (next hop, until when), kept in a small
        destination cache that ``gen`` and the lifetime invalidate."""
        hop, until = self._decide(dst, now)
        hops = self._hops
        if len(hops) >= MAX_CACHED_HOPS:
            hops.clear()
        hops[dst] = (hop, until, self.gen.value)
        return hop, until

    def _decide(self, dst: bytes, now: float) -> tuple[bytes, float]:
        redirected = self.redirects.get(dst)
        if redirected is not None:
            if redirected[1] > now:
                return redirected
            del self.redirects[dst]
        if is_link_local(dst) or dst[0] == 0xFF:
            return dst, INF
        for p in self.static_prefixes:
            if p.contains(dst):
                return dst, INF
        until = max((t for p, t in self.onlink.values() if t > now and p.contains(dst)), default=None)
        if until is not None:
            return dst, until
        if self.gateway is not None:
            return self.gateway, INF
        for router, expires in self.routers.items():
            if expires > now:
                return router, expires
        raise OSError(errno.ENETUNREACH, "Network is unreachable (no IPv6 route and no default router)")

    def source(self, dst: bytes) -> bytes:
        """RFC 6724, simplified (see the module docstring); EADDRNOTAVAIL when nothing is usable yet."""
        best, best_key = None, None
        link_scope = is_link_local(dst) or (dst[0] == 0xFF and (dst[1] & 0x0F) <= 2)
        addresses = self.addresses
        for a in self.valid_set:
            if is_link_local(a):
                if link_scope and addresses[a].state == PREFERRED:
                    return a
                continue
            if link_scope:
                continue
            entry = addresses[a]
            key = (entry.state == PREFERRED,  # rule 3: avoid deprecated addresses
                   entry.temporary == self.prefer_temporary,  # rule 7: temporary ones when asked to
                   128 - (to_int(a) ^ to_int(dst)).bit_length())  # rule 8: longest matching prefix
            if best_key is None or key > best_key:
                best, best_key = a, key
        if best is None:
            best = self.link_local
        if best is None:
            raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address (no usable IPv6 address yet)")
        return best

    # -- what Router Advertisements teach (RFC 4861 6.3.4) ----------------------
    def learn_router(self, router: bytes, lifetime: float, now: float) -> bool:
        """False when the table is full (the caller counts it)."""
        self.gen.bump()
        if lifetime <= 0:
            self.routers.pop(router, None)
            return True
        if router not in self.routers and len(self.routers) >= MAX_ROUTERS:
            self._expire(now)
            if len(self.routers) >= MAX_ROUTERS:
                return False
        self.routers[router] = now + lifetime
        return True

    def learn_redirect(self, dst: bytes, hop: bytes, lifetime: float, now: float) -> bool:
        """A validated Redirect (RFC 4861 8.3): ``dst`` via ``hop`` (itself when on-link). False if one was
        evicted to make room (the caller counts it)."""
        table = self.redirects
        evicted = False
        self.gen.bump()
        if table.pop(dst, None) is None and len(table) >= MAX_REDIRECTS:
            for d in [d for d, (_, t) in table.items() if t <= now]:
                del table[d]
            if len(table) >= MAX_REDIRECTS:
                del table[next(iter(table))]
                evicted = True
        table[dst] = (hop, now + lifetime)
        return not evicted

    def learn_prefix(self, prefix: Prefix, lifetime: float, now: float) -> bool:
        key = (prefix.network, prefix.length)
        self.gen.bump()
        if lifetime <= 0:
            self.onlink.pop(key, None)
            return True
        if key not in self.onlink and len(self.onlink) >= MAX_ONLINK:
            self._expire(now)
            if len(self.onlink) >= MAX_ONLINK:
                return False
        self.onlink[key] = (prefix, now + lifetime)
        return True

    def _expire(self, now: float) -> None:
        for r in [r for r, t in self.routers.items() if t <= now]:
            del self.routers[r]
        for k in [k for k, (_, t) in self.onlink.items() if t <= now]:
            del self.onlink[k]
