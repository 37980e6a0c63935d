"""Neighbor Discovery (RFC 4861) and stateless address autoconfiguration (RFC 4862, RFC 7217).

The neighbour cache (RFC 4861 7.3): each entry is INCOMPLETE (resolving:
multicast NS every ``retrans_timer``, at most ``max_multicast_solicit``),
REACHABLE (confirmed within ``reachable_time``), STALE (unconfirmed; used,
but the first packet sent moves it to DELAY), DELAY (``delay_first_probe``
seconds for an upper layer to confirm) or PROBE (unicast NS every
``retrans_timer``, at most ``max_unicast_solicit``, then the entry is
deleted). REACHABLE turns STALE lazily when looked up after its time.

Reachability confirmation by upper layers (RFC 4861 7.3.1, as Linux's
``dst_confirm``): ``progress(neighbour, now)``, when the stack sets it, gives a
mark of the forward progress of the transport connections that go through
that neighbour (each TCP connection's SND.UNA). A REACHABLE entry whose time
is up, or a DELAY entry whose delay is up, is REACHABLE again for
``reachable_time`` when the mark moved since it was last taken (an ACK of new
data came back: our packets reach the neighbour), without a probe
(``ndp.upper_confirmed``); a PROBE entry too, at its next probe. Coarser
than Linux's confirmation timestamp: progress seen at one lapse may be up to
one reachable time old, so an entry stays REACHABLE at most two reachable
times after the last ACK of new data. Marks are
taken only then and when an entry enters DELAY, never per segment, so an
idle neighbour costs nothing and a busy connection keeps its next hop
REACHABLE without a Neighbor Solicitation.

Caps, each reached one counted: at most ``max_entries`` entries (default
1024; the oldest STALE entry is evicted first, ``ndp.evicted``), at most
``max_pending`` INCOMPLETE at once (``ndp.pending_full``), packets queued
per neighbour and in total (``ndp.queue_full``). Spoofing rules: every NDP
message must arrive with hop limit 255 and code 0 (RFC 4861 7.1.1,
``ndp.bad_hop_limit``: it was sent on-link); an unsolicited Neighbor
Advertisement never creates an entry (7.2.5, ``ndp.unsolicited_na``); an NS
from the unspecified address must be for a solicited-node group and carry
no link-layer option; an NA to a multicast group may not say "solicited".

Router Advertisements (RFC 4861 6.3.4) from a link-local source teach the
default router (its lifetime; 0 removes it), on-link prefixes, the link MTU
(1280..the device MTU), hop limit, reachable time and retransmission timer;
an autonomous /64 prefix gives a global address (RFC 4862 5.5.3) with the
stable interface identifier, deprecated at the end of its preferred lifetime and removed at the end of
its valid one, later RAs updating both by the two-hour rule (``ustack.net.slaac``).
Router Solicitations are ignored (a host).
``start`` sends up to ``max_rtr_solicitations`` RS, ``rtr_solicitation_interval`` apart, until an RA comes.

Redirects (RFC 4861 8) are validated as 8.1 asks, each failure a named drop:
a link-local source (``ndp.redirect_not_link_local``), hop limit 255 and
code 0 (as every NDP message), 40 octets or more (``ndp.bad_length``), a
unicast destination (``ndp.redirect_bad_destination``), a target that is
link-local or the destination itself and not ours
(``ndp.redirect_bad_target``), sent by the current first-hop router for that
destination (``ndp.redirect_not_from_router``: no one else may steer our
traffic), options of non-zero length. A valid one is applied (8.3): the
destination cache sends the destination to the target for
``redirect_lifetime`` seconds (``ndp.redirects_applied``); a Target
Link-Layer Address option creates or updates the target's neighbour entry as
STALE (IsRouter set when the target is not the destination). ``accept_redirects=False``
drops them all as ``ndp.redirect_ignored`` (Linux's accept_redirects=0).

Addresses (RFC 4862): the link-local address fe80::/64 + an interface
identifier from RFC 7217 (the first 64 bits of SHA-256 over the prefix, the
MAC, the DAD counter and ``stable_secret``: stable for one secret, opaque,
different per prefix), or with ``iid="random"`` 64 random bits per address
(RFC 8981 3.3.1's identifier). With ``use_tempaddr`` 1 or 2, RFC 8981
temporary addresses are made beside the SLAAC ones (``ustack.net.tempaddr``:
lifetimes, regeneration, deprecation; ``temp_valid_lifetime``,
``temp_preferred_lifetime``). Every new address is TENTATIVE while DAD runs
(``dad_transmits`` NS from :: to its solicited-node group, ``retrans_timer``
apart); an NS from :: or an NA for it means someone else has it: it becomes
DUPLICATE (``ndp.dad_failed``); a generated one is retried with the next DAD
counter, at most ``IDGEN_RETRIES`` times (RFC 7217 6). Upper-layer
reachability hints (RFC 4861 7.3.1) are not used: STALE entries are probed.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from typing import Callable, Optional

from ustack.net.addr import ANY6, Prefix, to_str
from ustack.net.route6 import (
    ALL_NODES,
    ALL_ROUTERS,
    DUPLICATE,
    LINK_LOCAL_PREFIX,
    PREFERRED,
    TENTATIVE,
    Interface6,
    is_link_local,
    multicast_mac,
    solicited_node,
)
from ustack.net.slaac import SlaacLifetimes
from ustack.net.tempaddr import TEMP_PREFERRED_LIFETIME, TEMP_VALID_LIFETIME, TempAddresses, random_iid, usable_iid
from ustack.stats import Stats
from ustack.timers import TimerHeap
from ustack.wire import WireError
from ustack.wire.icmpv6 import (
    NA_OVERRIDE,
    NA_SOLICITED,
    NEIGHBOR_ADVERT,
    NEIGHBOR_SOLICIT,
    OPT_SOURCE_LLA,
    OPT_TARGET_LLA,
    ROUTER_ADVERT,
    REDIRECT,
    ROUTER_SOLICIT,
    Icmpv6Message,
    NeighborAdvert,
    NeighborSolicit,
    Redirect,
    RouterAdvert,
    RouterSolicit,
)

INCOMPLETE = "INCOMPLETE"
REACHABLE = "REACHABLE"
STALE = "STALE"
DELAY = "DELAY"
PROBE = "PROBE"
IDGEN_RETRIES = 3
# A Router Advertisement's timers (RFC 4861 6.3.4), bounded. Below: Linux's floors (ndisc_router_discovery:
# Retrans Timer at least HZ/100, Reachable Time at least HZ/10). Above: Reachable Time at most RFC 4861's
# MAX_REACHABLE_TIME (a larger one is ignored); Retrans Timer at most RETRANS_TIMER_MAX, our own bound (Linux
# has none below MAX_SCHEDULE_TIMEOUT): one on-link RA of 0xffffffff ms (~49.7 days) would otherwise stall
# DAD and every address resolution for that long.
RETRANS_TIMER_MIN = 0.010
RETRANS_TIMER_MAX = 60.0
REACHABLE_TIME_MIN = 0.100
MAX_REACHABLE_TIME_MS = 3_600_000


def stable_iid(prefix: bytes, mac: bytes, dad_counter: int, secret: bytes) -> bytes:
    """RFC 7217 section 5: F(Prefix, Net_Iface, Network_ID, DAD_Counter, secret_key), 64 bits."""
    return usable_iid(hashlib.sha256(prefix[:8] + mac + dad_counter.to_bytes(1, "big") + secret).digest()[:8])


class Neighbor:
    __slots__ = ("state", "mac", "reachable_until", "probes", "timer", "queue", "router", "mark")

    def __init__(self, state: str):
        self.state = state
        self.mac: Optional[bytes] = None
        self.reachable_until = 0.0
        self.probes = 0
        self.timer = None
        self.queue: deque = deque()
        self.router = False
        self.mark: Optional[dict] = None  # upper-layer progress when last looked at (RFC 4861 7.3.1)


class NdpLayer:
    """The neighbour cache and router/address discovery of one IPv6 interface.

    ``send(dst_mac, src, dst, msg)`` puts an ICMPv6 message on the wire with
    hop limit 255 (the IPv6 layer provides it).
    """

    def __init__(self, iface: Interface6, timers: TimerHeap, stats: Stats,
                 send: Callable[[bytes, bytes, bytes, Icmpv6Message], None], *, stable_secret: bytes,
                 reachable_time: float = 30.0, retrans_timer: float = 1.0, delay_first_probe: float = 5.0,
                 max_multicast_solicit: int = 3, max_unicast_solicit: int = 3, max_entries: int = 1024,
                 max_pending: int = 64, queue_per_host: int = 16, queue_total: int = 256, dad_transmits: int = 1,
                 max_rtr_solicitations: int = 3, rtr_solicitation_interval: float = 4.0, iid: str = "stable",
                 accept_redirects: bool = True, redirect_lifetime: float = 600.0, use_tempaddr: int = 0,
                 temp_valid_lifetime: float = TEMP_VALID_LIFETIME,
                 temp_preferred_lifetime: float = TEMP_PREFERRED_LIFETIME, rng: Optional[random.Random] = None):
        if iid not in ("stable", "random"):
            raise ValueError("iid is 'stable' (RFC 7217) or 'random' (RFC 8981)")
        self.iid = iid
        self.accept_redirects = accept_redirects
        self.redirect_lifetime = redirect_lifetime
        self.iface = iface
        self.timers = timers
        self.stats = stats
        self.send = send
        self.stable_secret = stable_secret
        self.reachable_time = reachable_time
        self.retrans_timer = retrans_timer
        self.delay_first_probe = delay_first_probe
        self.max_multicast_solicit = max_multicast_solicit
        self.max_unicast_solicit = max_unicast_solicit
        self.max_entries = max_entries
        self.max_pending = max_pending
        self.queue_per_host = queue_per_host
        self.queue_total = queue_total
        self.dad_transmits = dad_transmits
        self.max_rtr_solicitations = max_rtr_solicitations
        self.rtr_solicitation_interval = rtr_solicitation_interval
        self.cur_hop_limit: Optional[int] = None  # from RAs
        # upper-layer forward progress through a neighbour (RFC 4861 7.3.1): fn(ip, now) -> {flow: mark}
        self.progress: Optional[Callable[[bytes, float], dict]] = None
        self.cache: dict[bytes, Neighbor] = {}
        self.pending = 0
        self.queued = 0
        self._rs_sent = 0
        self._rs_timer = timers.timer(self._send_rs)
        self._ra_seen = False
        self._dad_counter: dict[bytes, int] = {}  # generated address -> its RFC 7217 DAD counter
        self.slaac = SlaacLifetimes(iface, timers, stats)  # RFC 4862 5.5.3/5.5.4 lifetimes
        # RFC 8981 temporary addresses (None: off, as Linux's use_tempaddr=0)
        self.temporary: Optional[TempAddresses] = None
        if use_tempaddr:
            self.temporary = TempAddresses(iface, timers, stats, self._start_dad, mode=use_tempaddr,
                                           dad_transmits=dad_transmits, retrans_timer=retrans_timer,
                                           valid_lifetime=temp_valid_lifetime,
                                           preferred_lifetime=temp_preferred_lifetime, rng=rng)

    # -- addresses (RFC 4862) --------------------------------------------------
    def start(self, now: float) -> None:
        """Generate the link-local address, start DAD on every tentative address, solicit routers."""
        iface = self.iface
        if not any(is_link_local(a) for a in iface.addresses):
            self._add_generated(LINK_LOCAL_PREFIX, 64, "link-local", 0, now)
        for entry in list(iface.addresses.values()):
            if entry.state == TENTATIVE and entry.dad_timer is None:
                self._start_dad(entry.addr, now)
        if self.max_rtr_solicitations:
            self._rs_timer.arm(now + (self.retrans_timer * max(self.dad_transmits, 0)))

    def _add_generated(self, prefix: bytes, length: int, origin: str, counter: int, now: float,
                       lifetimes: tuple = ()) -> None:
        """A generated address; ``lifetimes``: a SLAAC address's (valid, preferred) from its prefix."""
        if self.iid == "random":
            addr = prefix[:8] + random_iid()
        else:
            addr = prefix[:8] + stable_iid(prefix, self.iface.mac, counter, self.stable_secret)
        if addr in self.iface.addresses:
            return
        entry = self.iface.add(Prefix(f"{to_str(addr)}/{length}"), origin)
        if lifetimes:
            self.slaac.configure(entry, lifetimes[0], lifetimes[1], now)
        counters = self._dad_counter
        if len(counters) > 64:  # (forget the counters of addresses that are gone)
            self._dad_counter = counters = {a: c for a, c in counters.items() if a in self.iface.addresses}
        counters[addr] = counter
        self._start_dad(addr, now)

    def add_static(self, prefix: Prefix, now: Optional[float] = None) -> None:
        self.iface.add(prefix, "static", TENTATIVE if self.dad_transmits else PREFERRED)
        if now is not None and self.dad_transmits:
            self._start_dad(prefix.addr, now)

    def _start_dad(self, addr: bytes, now: float) -> None:
        entry = self.iface.addresses[addr]
        if self.dad_transmits <= 0:
            self.iface.set_state(addr, PREFERRED)
            return
        entry.dad_sent = 0
        entry.dad_timer = self.timers.timer(lambda t, a=addr: self._dad_step(a, t))
        self._dad_step(addr, now)

    def _dad_step(self, addr: bytes, now: float) -> None:
        entry = self.iface.addresses.get(addr)
        if entry is None or entry.state != TENTATIVE:
            return
        if entry.dad_sent >= self.dad_transmits:
            # (a SLAAC address whose preferred lifetime ended during DAD is DEPRECATED at once)
            self.iface.set_state(addr, self.slaac.dad_passed(entry, now))
            self.stats.inc("ndp.dad_succeeded")
            return
        entry.dad_sent += 1
        group = solicited_node(addr)
        self.send(multicast_mac(group), ANY6, group, NeighborSolicit(addr).to_message())
        self.stats.inc("ndp.dad_solicitations_sent")
        entry.dad_timer.arm(now + self.retrans_timer)

    def _dad_failed(self, addr: bytes, now: float) -> None:
        entry = self.iface.addresses[addr]
        if entry.dad_timer is not None:
            entry.dad_timer.cancel()
        self.iface.set_state(addr, DUPLICATE)
        self.stats.inc("ndp.dad_failed")
        if entry.temporary and self.temporary is not None:
            self.temporary.dad_failed(entry, now)
            return
        counters = self._dad_counter
        if addr in counters and counters[addr] < IDGEN_RETRIES:  # RFC 7217 6: the next identifier
            self._add_generated(addr[:8], entry.prefix.length, entry.origin, counters[addr] + 1, now)
            if entry.origin == "slaac":
                nxt = next((e for e in self.iface.addresses.values()
                            if e.origin == "slaac" and e.addr[:8] == addr[:8] and e.state == TENTATIVE), None)
                if nxt is not None:
                    self.slaac.inherit(nxt, entry, now)

    # -- router discovery --------------------------------------------------------
    def _send_rs(self, now: float) -> None:
        if self._ra_seen or self._rs_sent >= self.max_rtr_solicitations:
            return
        src = self.iface.link_local
        if src is None:  # DAD has not passed yet: try again later
            self._rs_timer.arm(now + self.retrans_timer)
            return
        self._rs_sent += 1
        self.send(multicast_mac(ALL_ROUTERS), src, ALL_ROUTERS,
                  RouterSolicit(((OPT_SOURCE_LLA, self.iface.mac),)).to_message())
        self.stats.inc("ndp.router_solicitations_sent")
        self._rs_timer.arm(now + self.rtr_solicitation_interval)

    # -- the neighbour cache -------------------------------------------------------
    def lookup(self, ip: bytes, now: float) -> Optional[bytes]:
        """The MAC to send to ``ip`` now, or None (then ``resolve_then``). Moves STALE to DELAY (7.3.3)."""
        n = self.cache.get(ip)
        if n is None or n.mac is None:
            return None
        if n.state == REACHABLE:
            if now < n.reachable_until:
                return n.mac
            if self._confirmed(ip, n, now):
                n.reachable_until = now + self.reachable_time
                return n.mac
            n.state = STALE
        if n.state == STALE:
            n.state = DELAY
            n.timer.arm(now + self.delay_first_probe)
            if n.mark is None and self.progress is not None:
                n.mark = self.progress(ip, now)  # what an upper layer must move during the delay
            self.iface.gen.bump()  # DELAY and PROBE entries are used as is: frame templates may copy them now
        return n.mac

    def _confirmed(self, ip: bytes, n: Neighbor, now: float) -> bool:
        """RFC 4861 7.3.1: has an upper layer made forward progress through ``ip`` since ``n.mark``?
        Takes the new mark either way; counted ``ndp.upper_confirmed`` when it has."""
        progress = self.progress
        if progress is None:
            return False
        old, n.mark = n.mark, progress(ip, now)
        if old is None:
            return False
        new = n.mark
        # a flow present both times whose mark moved (flows that opened or closed meanwhile prove nothing)
        if any(k in new and new[k] != v for k, v in old.items()):
            self.stats.inc("ndp.upper_confirmed")
            return True
        return False

    def _upper_reachable(self, n: Neighbor, now: float) -> None:
        """DELAY or PROBE -> REACHABLE on an upper layer's confirmation (RFC 4861 7.3.3, appendix C)."""
        n.state = REACHABLE
        n.probes = 0
        n.reachable_until = now + self.reachable_time
        n.timer.cancel()
        self.iface.gen.bump()  # frame templates bound their life by the reachable time again

    def resolve_then(self, ip: bytes, send: Callable[[bytes], None], now: float) -> None:
        """Call ``send(mac)`` once ``ip`` resolves; queued meanwhile (bounded)."""
        stats = self.stats
        n = self.cache.get(ip)
        if self.queued >= self.queue_total or (n is not None and len(n.queue) >= self.queue_per_host):
            stats.drop("ndp.queue_full")
            return
        if n is None:
            if self.pending >= self.max_pending:
                stats.drop("ndp.pending_full")
                return
            n = self._new_entry(ip, INCOMPLETE, now)
            if n is None:
                stats.drop("ndp.cache_full")
                return
            self.pending += 1
            self._solicit(ip, n, now)
        elif n.mac is not None:  # resolved meanwhile
            send(n.mac)
            return
        n.queue.append(send)
        self.queued += 1

    def _new_entry(self, ip: bytes, state: str, now: float) -> Optional[Neighbor]:
        cache = self.cache
        if len(cache) >= self.max_entries:
            self.stats.inc("ndp.cache_full")
            victim = next((k for k, v in cache.items() if v.state == STALE), None)
            if victim is None:
                victim = next((k for k, v in cache.items() if v.state != INCOMPLETE), None)
            if victim is None:
                return None
            self._delete(victim)
            self.stats.inc("ndp.evicted")
        n = cache[ip] = Neighbor(state)
        n.timer = self.timers.timer(lambda t, ip=ip: self._timeout(ip, t))
        return n

    def _delete(self, ip: bytes) -> None:
        n = self.cache.pop(ip, None)
        if n is None:
            return
        self.iface.gen.bump()  # frame templates copied its MAC (_fp_tmpl.pxi)
        if n.timer is not None:
            n.timer.cancel()
        if n.state == INCOMPLETE:
            self.pending -= 1
        if n.queue:
            self.queued -= len(n.queue)
            self.stats.drop("ndp.unresolved", len(n.queue))
            n.queue.clear()

    def _solicit(self, ip: bytes, n: Neighbor, now: float) -> None:
        """One NS: multicast to the solicited-node group while INCOMPLETE, unicast in PROBE (7.2.2)."""
        n.probes += 1
        try:
            src = self.iface.source(ip)
        except OSError:
            src = None
        if src is not None:
            msg = NeighborSolicit(ip, ((OPT_SOURCE_LLA, self.iface.mac),)).to_message()
            if n.state == PROBE and n.mac is not None:
                self.send(n.mac, src, ip, msg)
            else:
                group = solicited_node(ip)
                self.send(multicast_mac(group), src, group, msg)
            self.stats.inc("ndp.solicitations_sent")
        n.timer.arm(now + self.retrans_timer)

    def _timeout(self, ip: bytes, now: float) -> None:
        n = self.cache.get(ip)
        if n is None:
            return
        if n.state == INCOMPLETE:
            if n.probes >= self.max_multicast_solicit:
                self.stats.inc("ndp.resolution_failures")
                self._delete(ip)
                return
            self._solicit(ip, n, now)
        elif n.state == DELAY:
            if self._confirmed(ip, n, now):
                self._upper_reachable(n, now)
                return
            n.state = PROBE
            n.probes = 0
            self._solicit(ip, n, now)
        elif n.state == PROBE:
            if self._confirmed(ip, n, now):
                self._upper_reachable(n, now)
                return
            if n.probes >= self.max_unicast_solicit:
                self.stats.inc("ndp.unreachable")
                self._delete(ip)
                return
            self._solicit(ip, n, now)

    def _update(self, ip: bytes, n: Neighbor, mac: bytes, state: str, now: float) -> None:
        was_incomplete = n.state == INCOMPLETE
        self.iface.gen.bump()  # a new MAC or state: frame templates are rebuilt (_fp_tmpl.pxi)
        n.mac = bytes(mac)
        n.state = state
        n.mark = None  # a confirmation by ND itself: upper-layer progress is looked at afresh
        if state == REACHABLE:
            n.reachable_until = now + self.reachable_time
        if n.timer is not None:
            n.timer.cancel()
        if was_incomplete:
            self.pending -= 1
            n.probes = 0
            queue, n.queue = n.queue, deque()
            self.queued -= len(queue)
            for send in queue:
                send(n.mac)

    def _learn_stale(self, ip: bytes, lla: bytes, now: float) -> Optional[Neighbor]:
        """A link-layer address heard from ``ip`` (an NS, RA or Redirect option, RFC 4861 7.2.3, 6.3.4, 8.3):
        a new entry is STALE, an entry with another address becomes STALE with this one."""
        n = self.cache.get(ip)
        if n is None:
            n = self._new_entry(ip, STALE, now)
            if n is not None:
                n.mac = bytes(lla)
        elif n.mac != lla:
            self._update(ip, n, lla, STALE, now)
        return n

    def entries(self, now: float) -> list[tuple[str, str, str]]:
        """(address, MAC, state) of every entry (for snapshots)."""
        return [(to_str(ip), n.mac.hex(":") if n.mac else "", n.state) for ip, n in self.cache.items()]

    # -- input -----------------------------------------------------------------
    def input(self, msg: Icmpv6Message, src: bytes, dst: bytes, hop_limit: int, dst_mac: bytes, now: float) -> None:
        stats = self.stats
        if hop_limit != 255 or msg.code != 0:
            stats.drop("ndp.bad_hop_limit" if hop_limit != 255 else "ndp.bad_code")
            return
        try:
            if msg.type == NEIGHBOR_SOLICIT:
                self._ns_in(NeighborSolicit.from_message(msg), src, dst, now)
            elif msg.type == NEIGHBOR_ADVERT:
                self._na_in(NeighborAdvert.from_message(msg), src, dst, now)
            elif msg.type == ROUTER_ADVERT:
                self._ra_in(RouterAdvert.from_message(msg), src, now)
            elif msg.type == ROUTER_SOLICIT:
                RouterSolicit.from_message(msg)
                stats.drop("ndp.rs_ignored")  # we are a host (RFC 4861 6.2.6)
            elif msg.type == REDIRECT:
                if not self.accept_redirects:
                    stats.drop("ndp.redirect_ignored")
                    return
                self._redirect_in(Redirect.from_message(msg), src, now)
        except WireError as e:
            stats.drop(e.reason)

    def _ns_in(self, ns: NeighborSolicit, src: bytes, dst: bytes, now: float) -> None:
        stats = self.stats
        iface = self.iface
        target = ns.target
        lla = ns.source_lla
        if target[0] == 0xFF:
            stats.drop("ndp.bad_target")
            return
        if src == ANY6 and (dst != solicited_node(target) or lla is not None):
            stats.drop("ndp.bad_solicitation")  # RFC 4861 7.1.1
            return
        entry = iface.addresses.get(target)
        if entry is None or entry.state == DUPLICATE:
            stats.drop("ndp.not_our_target")
            return
        if entry.state == TENTATIVE:
            # RFC 4862 5.4.3: an NS from :: for our tentative address is someone else's DAD.
            if src == ANY6:
                self._dad_failed(target, now)
            else:
                stats.drop("ndp.tentative_target")
            return
        stats.inc("ndp.solicitations_received")
        if src == ANY6:
            # RFC 4861 7.2.4: answer a DAD probe for a preferred address to all-nodes, not solicited.
            self.send(multicast_mac(ALL_NODES), target, ALL_NODES,
                      NeighborAdvert(target, NA_OVERRIDE, ((OPT_TARGET_LLA, iface.mac),)).to_message())
            stats.inc("ndp.advertisements_sent")
            return
        if lla is not None:
            # RFC 4861 7.2.3: create (STALE) or update the sender's entry.
            if len(lla) != 6 or lla[0] & 1:
                stats.drop("ndp.bad_lla")
                return
            self._learn_stale(src, lla, now)
        n = self.cache.get(src)
        mac = n.mac if n is not None and n.mac is not None else lla
        if mac is None:
            stats.drop("ndp.no_lla")  # unicast NS without an option and no entry: nowhere to answer
            return
        self.send(mac, target, src, NeighborAdvert(target, NA_SOLICITED | NA_OVERRIDE,
                                                   ((OPT_TARGET_LLA, iface.mac),)).to_message())
        stats.inc("ndp.advertisements_sent")

    def _na_in(self, na: NeighborAdvert, src: bytes, dst: bytes, now: float) -> None:
        stats = self.stats
        target = na.target
        if target[0] == 0xFF or (dst[0] == 0xFF and na.solicited):
            stats.drop("ndp.bad_advertisement")  # RFC 4861 7.1.2
            return
        ours = self.iface.addresses.get(target)
        if ours is not None:
            if ours.state == TENTATIVE:
                self._dad_failed(target, now)  # RFC 4862 5.4.4
            else:
                stats.inc("ndp.address_conflict")
                stats.drop("ndp.conflict")
            return
        n = self.cache.get(target)
        if n is None:
            stats.drop("ndp.unsolicited_na")  # RFC 4861 7.2.5: never create an entry
            return
        stats.inc("ndp.advertisements_received")
        lla = na.target_lla
        if lla is not None and (len(lla) != 6 or lla[0] & 1):
            stats.drop("ndp.bad_lla")
            return
        n.router = na.router
        if n.state == INCOMPLETE:
            if lla is None:
                stats.drop("ndp.no_lla")
                return
            self._update(target, n, lla, REACHABLE if na.solicited else STALE, now)
            return
        changed = lla is not None and lla != n.mac
        if not na.override and changed:
            if n.state == REACHABLE:
                n.state = STALE
                self.iface.gen.bump()
            stats.drop("ndp.no_override")
            return
        if na.solicited:
            self._update(target, n, lla if lla is not None else n.mac, REACHABLE, now)
        elif changed:
            self._update(target, n, lla, STALE, now)

    def _redirect_in(self, rd: Redirect, src: bytes, now: float) -> None:
        """RFC 4861 8.1 validity checks, then 8.3: the destination cache and the target's entry."""
        stats = self.stats
        iface = self.iface
        target, dest = rd.target, rd.destination
        if not is_link_local(src):
            stats.drop("ndp.redirect_not_link_local")
            return
        if dest[0] == 0xFF:
            stats.drop("ndp.redirect_bad_destination")
            return
        if target[0] == 0xFF or not (is_link_local(target) or target == dest) or target in iface.addresses:
            stats.drop("ndp.redirect_bad_target")
            return
        try:
            first_hop = iface.next_hop(dest, now)
        except OSError:
            first_hop = None
        if first_hop != src or first_hop == dest:
            stats.drop("ndp.redirect_not_from_router")  # only the router we use for dest may redirect it
            return
        lla = rd.target_lla
        if lla is not None and (len(lla) != 6 or lla[0] & 1):
            stats.drop("ndp.bad_lla")
            return
        if not iface.learn_redirect(dest, target, self.redirect_lifetime, now):
            stats.inc("ndp.redirect_evicted")
        stats.inc("ndp.redirects_applied")
        n = self._learn_stale(target, lla, now) if lla is not None else self.cache.get(target)
        if n is not None and target != dest:
            n.router = True  # 8.3: a target other than the destination is a router; else the flag stays

    def _ra_in(self, ra: RouterAdvert, src: bytes, now: float) -> None:
        stats = self.stats
        iface = self.iface
        if not is_link_local(src):
            stats.drop("ndp.ra_not_link_local")  # RFC 4861 6.1.2
            return
        stats.inc("ndp.router_advertisements_received")
        iface.gen.bump()  # hop limit, MTU, routers, prefixes: what frame templates copy may change
        self._ra_seen = True
        self._rs_timer.cancel()
        if ra.cur_hop_limit:
            self.cur_hop_limit = ra.cur_hop_limit
        if ra.reachable_time and ra.reachable_time <= MAX_REACHABLE_TIME_MS:
            self.reachable_time = max(REACHABLE_TIME_MIN, ra.reachable_time / 1000.0)
        if ra.retrans_timer:
            retrans = ra.retrans_timer / 1000.0
            if not RETRANS_TIMER_MIN <= retrans <= RETRANS_TIMER_MAX:
                stats.inc("ndp.ra_retrans_timer_clamped")
            self.retrans_timer = min(RETRANS_TIMER_MAX, max(RETRANS_TIMER_MIN, retrans))
        if not iface.learn_router(src, ra.router_lifetime, now):
            stats.drop("ndp.router_table_full")
        lla = ra.source_lla
        if lla is not None and len(lla) == 6 and not lla[0] & 1:
            n = self._learn_stale(src, lla, now)
            if n is not None:
                n.router = True
        mtu = ra.mtu
        if mtu is not None:
            if 1280 <= mtu <= iface.link_mtu:
                iface.mtu = mtu
            else:
                stats.drop("ndp.bad_mtu")
        for pi in ra.prefixes:
            if is_link_local(pi.prefix) or pi.length > 128 or pi.preferred_lifetime > pi.valid_lifetime:
                stats.drop("ndp.bad_prefix")
                continue
            try:
                prefix = Prefix(f"{to_str(pi.prefix)}/{pi.length}")
            except ValueError:
                stats.drop("ndp.bad_prefix")
                continue
            if pi.on_link and not iface.learn_prefix(prefix, pi.valid_lifetime, now):
                stats.drop("ndp.prefix_table_full")
            if pi.autonomous and pi.length == 64 and pi.valid_lifetime and self.temporary is not None:
                self.temporary.prefix_seen(pi.prefix, pi.valid_lifetime, pi.preferred_lifetime, now)
            if pi.autonomous and pi.length == 64:
                self._slaac_prefix(pi, now)

    def _slaac_prefix(self, pi, now: float) -> None:
        """RFC 4862 5.5.3 d/e: an address from an autonomous /64 prefix, or its lifetimes updated."""
        iface = self.iface
        ours = [e for e in iface.addresses.values()
                if e.origin == "slaac" and e.addr[:8] == pi.prefix[:8] and e.state != DUPLICATE]
        for entry in ours:
            self.slaac.update(entry, pi.valid_lifetime, pi.preferred_lifetime, now)
        if ours or not pi.valid_lifetime:
            return
        if any(e.origin == "slaac" and e.addr[:8] == pi.prefix[:8] for e in iface.addresses.values()):
            return  # only duplicates left from it (RFC 7217 6 gave up)
        if sum(1 for e in iface.addresses.values() if e.origin == "slaac") < 16:
            self._add_generated(pi.prefix, 64, "slaac", 0, now, (pi.valid_lifetime, pi.preferred_lifetime))
        else:
            self.stats.drop("ndp.slaac_table_full")
