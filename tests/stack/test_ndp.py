"""Neighbor Discovery, extension headers and ICMPv6 errors against one stack: crafted frames in (scapy),
the frames it answers read off the other end of the pipe and dissected by scapy."""

from __future__ import annotations

from scapy.layers.inet import UDP
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6ND_RA,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptMTU,
    ICMPv6NDOptPrefixInfo,
    ICMPv6NDOptSrcLLAddr,
    ICMPv6PacketTooBig,
    ICMPv6ParamProblem,
    ICMPv6TimeExceeded,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.l2 import Ether

from ustack.net.addr import ANY6, parse as ip_addr
from ustack.net.ndp import DELAY, INCOMPLETE, PROBE, REACHABLE, STALE
from ustack.net.route6 import DUPLICATE, PREFERRED, solicited_node
from ustack.stack import Stack

from .netsim import Net

A6 = "fd00::1"
PEER = "fd00::9"
PEER_MAC = "02:00:00:00:00:99"


class One:
    """Stack ``a`` on the pipe; the other end is read raw (no stack polls it)."""

    def __init__(self, **kw):
        self.net = Net(a_addr=["198.18.0.1/24", A6 + "/64"], **kw)
        self.a = self.net.a
        self.mac = ":".join(f"{b:02x}" for b in self.a.iface.mac)
        self.lla = None
        self.settle(3)
        self.lla = self.a.iface6.link_local
        self.out()  # DAD and router solicitations

    def settle(self, seconds: float) -> None:
        clock = self.net.clock
        end = clock.now + seconds
        while True:
            d = self.a.poll(clock.now)
            if d is None or d > end:
                clock.set(end)
                self.a.poll(clock.now)
                return
            clock.set(max(d, clock.now))

    def send(self, pkt) -> None:
        self.net.link.a._deliver(self.net.clock.now, bytes(pkt))
        self.a.poll(self.net.clock.now)

    def out(self) -> list:
        end = self.net.link.b
        frames = end.rx_burst(256)
        pkts = [Ether(bytes(f)) for f in frames]
        end.rx_release(frames)
        return pkts

    def close(self):
        self.net.close()


def eth(dst=None):
    return Ether(src=PEER_MAC, dst=dst or "02:00:00:00:00:0a")


def test_link_local_dad_and_router_solicitation_on_the_wire():
    net = Net(a_addr=["198.18.0.1/24", A6 + "/64"])
    a = net.a
    a.poll(net.clock.now)
    frames = net.link.b.rx_burst(64)
    pkts = [Ether(bytes(f)) for f in frames]
    ns = [p for p in pkts if ICMPv6ND_NS in p]
    lla = next(k for k in a.iface6.addresses if k[0] == 0xFE)
    assert sorted(ip_addr(p[ICMPv6ND_NS].tgt) for p in ns) == sorted([ip_addr(A6), lla])
    for p in ns:  # RFC 4862 5.4.2: from ::, to the solicited-node group, hop limit 255, no link-layer option
        assert p[IPv6].src == "::" and p[IPv6].hlim == 255 and ICMPv6NDOptSrcLLAddr not in p
        assert p[IPv6].dst.startswith("ff02::1:ff") and p.dst.startswith("33:33:ff")
    net.close()


def test_neighbor_solicitation_answered_and_sender_cached_stale():
    one = One()
    one.send(eth(f"33:33:ff:00:00:01") / IPv6(src=PEER, dst="ff02::1:ff00:1", hlim=255)
             / ICMPv6ND_NS(tgt=A6) / ICMPv6NDOptSrcLLAddr(lladdr=PEER_MAC))
    (na,) = [p for p in one.out() if ICMPv6ND_NA in p]
    assert na.dst == PEER_MAC and na[IPv6].dst == PEER and na[IPv6].src == A6 and na[IPv6].hlim == 255
    assert (na[ICMPv6ND_NA].S, na[ICMPv6ND_NA].O, na[ICMPv6ND_NA].tgt) == (1, 1, A6)
    assert na[ICMPv6NDOptDstLLAddr].lladdr == one.mac
    entry = one.a.ndp.cache[ip_addr(PEER)]
    assert entry.state == STALE and entry.mac == bytes.fromhex(PEER_MAC.replace(":", ""))
    one.close()


def test_ndp_with_a_hop_limit_below_255_is_dropped():
    one = One()
    one.send(eth("33:33:ff:00:00:01") / IPv6(src=PEER, dst="ff02::1:ff00:1", hlim=64)
             / ICMPv6ND_NS(tgt=A6) / ICMPv6NDOptSrcLLAddr(lladdr=PEER_MAC))
    assert one.out() == [] and one.a.stats["drop.ndp.bad_hop_limit"] == 1
    one.close()


def test_unsolicited_na_creates_no_entry_rfc4861_7_2_5():
    one = One()
    one.send(eth("33:33:00:00:00:01") / IPv6(src=PEER, dst="ff02::1", hlim=255)
             / ICMPv6ND_NA(tgt=PEER, S=0, O=1) / ICMPv6NDOptDstLLAddr(lladdr=PEER_MAC))
    assert ip_addr(PEER) not in one.a.ndp.cache and one.a.stats["drop.ndp.unsolicited_na"] == 1
    one.close()


def test_resolution_states_incomplete_reachable_stale_delay_probe():
    one = One()
    a, now = one.a, one.net.clock.now
    ep = a.udp.endpoint()
    ep.sendto(b"queued while resolving", ip_addr(PEER), 9, now)
    a.poll(now)
    (ns,) = [p for p in one.out() if ICMPv6ND_NS in p]
    assert ns[IPv6].dst == "ff02::1:ff00:9" and ns[ICMPv6ND_NS].tgt == PEER and ns[IPv6].src == A6
    assert ns[ICMPv6NDOptSrcLLAddr].lladdr == one.mac
    assert a.ndp.cache[ip_addr(PEER)].state == INCOMPLETE
    one.send(eth() / IPv6(src=PEER, dst=A6, hlim=255) / ICMPv6ND_NA(tgt=PEER, S=1, O=1, R=0)
             / ICMPv6NDOptDstLLAddr(lladdr=PEER_MAC))
    (dgram,) = [p for p in one.out() if UDP in p]
    assert dgram.dst == PEER_MAC and bytes(dgram[UDP].payload) == b"queued while resolving"
    assert dgram[IPv6].fl != 0  # RFC 6437 flow label
    entry = a.ndp.cache[ip_addr(PEER)]
    assert entry.state == REACHABLE
    one.settle(31)  # reachable_time passes
    ep.sendto(b"x", ip_addr(PEER), 9, one.net.clock.now)
    assert entry.state == DELAY
    one.out()
    one.settle(5.5)  # DELAY_FIRST_PROBE_TIME: unicast probe
    assert entry.state == PROBE
    probes = [p for p in one.out() if ICMPv6ND_NS in p]
    assert probes and probes[0].dst == PEER_MAC and probes[0][IPv6].dst == PEER
    one.settle(4)  # three unanswered unicast probes: the entry goes
    assert ip_addr(PEER) not in a.ndp.cache and a.stats["ndp.unreachable"] == 1
    one.close()


def test_neighbor_cache_is_bounded():
    one = One(b_addr="198.18.0.2/24")
    one.a.ndp.max_entries = 8
    for i in range(40):
        one.send(eth("33:33:ff:00:00:01") / IPv6(src=f"fd00::1:{i:x}", dst="ff02::1:ff00:1", hlim=255)
                 / ICMPv6ND_NS(tgt=A6) / ICMPv6NDOptSrcLLAddr(lladdr=PEER_MAC))
    assert len(one.a.ndp.cache) == 8 and one.a.stats["ndp.evicted"] == 32
    one.close()


def test_dad_conflict_marks_the_address_duplicate():
    net = Net(a_addr=["198.18.0.1/24", A6 + "/64"])
    a = net.a
    a.poll(net.clock.now)
    net.link.a._deliver(net.clock.now, bytes(eth("33:33:00:00:00:01") / IPv6(src=A6, dst="ff02::1", hlim=255)
                                             / ICMPv6ND_NA(tgt=A6, S=0, O=1)
                                             / ICMPv6NDOptDstLLAddr(lladdr=PEER_MAC)))
    a.poll(net.clock.now)
    assert a.iface6.addresses[ip_addr(A6)].state == DUPLICATE and a.stats["ndp.dad_failed"] == 1
    net.clock.set(net.clock.now + 3)
    a.poll(net.clock.now)
    assert ip_addr(A6) not in a.iface6.preferred() and a.iface6.link_local is not None
    net.close()


def test_router_advertisement_router_prefix_mtu_and_slaac():
    one = One()
    ra = (eth("33:33:00:00:00:01") / IPv6(src="fe80::1", dst="ff02::1", hlim=255)
          / ICMPv6ND_RA(chlim=42, routerlifetime=1800) / ICMPv6NDOptSrcLLAddr(lladdr=PEER_MAC)
          / ICMPv6NDOptMTU(mtu=1400)
          / ICMPv6NDOptPrefixInfo(prefix="fd00:42::", prefixlen=64, L=1, A=1, validlifetime=3600,
                                  preferredlifetime=1800))
    one.send(ra)
    a = one.a
    assert a.iface6.mtu == 1400 and a.ipv6.mtu(ip_addr("fd00:42::5")) == 1400
    assert a.iface6.next_hop(ip_addr("2001:db8::1"), one.net.clock.now) == ip_addr("fe80::1")
    assert a.iface6.on_link(ip_addr("fd00:42::5"), one.net.clock.now)
    slaac = [e for e in a.iface6.addresses.values() if e.origin == "slaac"]
    assert len(slaac) == 1 and slaac[0].addr[:8] == ip_addr("fd00:42::")[:8]
    one.settle(2)
    assert slaac[0].state == PREFERRED
    assert a.ndp.cur_hop_limit == 42
    one.close()


def test_router_advertisement_from_a_global_source_ignored():
    one = One()
    one.send(eth("33:33:00:00:00:01") / IPv6(src=PEER, dst="ff02::1", hlim=255) / ICMPv6ND_RA(routerlifetime=1800))
    assert one.a.iface6.routers == {} and one.a.stats["drop.ndp.ra_not_link_local"] == 1
    one.close()


def test_multicast_to_a_group_not_joined_dropped_at_the_mac_level():
    one = One()
    one.send(eth("33:33:ff:00:00:77") / IPv6(src=PEER, dst="ff02::1:ff00:77", hlim=255)
             / ICMPv6ND_NS(tgt="fd00::77") / ICMPv6NDOptSrcLLAddr(lladdr=PEER_MAC))
    assert one.a.stats["drop.ipv6.not_for_us"] == 1 and one.out() == []
    one.close()


def test_echo_through_extension_headers_and_atomic_fragment():
    one = One()
    one.send(eth() / IPv6(src=PEER, dst=A6, hlim=64) / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt()
             / IPv6ExtHdrFragment(m=0, offset=0, id=5) / ICMPv6EchoRequest(id=1, seq=2, data=b"atomic"))
    one.send(eth() / IPv6(src=PEER, dst=A6, hlim=255) / ICMPv6ND_NA(tgt=PEER, S=1, O=1)
             / ICMPv6NDOptDstLLAddr(lladdr=PEER_MAC))
    replies = [p for p in one.out() if ICMPv6EchoReply in p]
    assert len(replies) == 1 and replies[0][ICMPv6EchoReply].data == b"atomic"
    assert one.a.stats["ipv6.atomic_fragments"] == 1
    one.close()


def _resolved(one):
    one.a.ndp.cache.clear()
    one.a.ndp.pending = one.a.ndp.queued = 0
    n = one.a.ndp._new_entry(ip_addr(PEER), REACHABLE, one.net.clock.now)
    n.mac, n.reachable_until = bytes.fromhex(PEER_MAC.replace(":", "")), one.net.clock.now + 1000


def test_routing_header_type0_rejected_with_parameter_problem():
    one = One()
    _resolved(one)
    one.send(eth() / IPv6(src=PEER, dst=A6) / IPv6ExtHdrRouting(type=0, segleft=1, addresses=["fd00::3"])
             / UDP(sport=1, dport=2))
    (pp,) = [p for p in one.out() if ICMPv6ParamProblem in p]
    assert (pp[ICMPv6ParamProblem].code, pp[ICMPv6ParamProblem].ptr) == (0, 42)
    assert one.a.stats["drop.ipv6.routing_header"] == 1
    one.close()


def test_unknown_next_header_parameter_problem_code1():
    one = One()
    _resolved(one)
    one.send(eth() / IPv6(src=PEER, dst=A6, nh=253) / b"experimental")
    (pp,) = [p for p in one.out() if ICMPv6ParamProblem in p]
    assert (pp[ICMPv6ParamProblem].code, pp[ICMPv6ParamProblem].ptr) == (1, 6)
    one.close()


def test_fragments_reassembled_overlaps_dropped_rfc5722():
    one = One()
    _resolved(one)
    ep = one.a.udp.endpoint()
    one.a.udp.bind(ep, ANY6, 7)
    data = bytes(IPv6(src=PEER, dst=A6) / UDP(sport=5, dport=7) / (b"z" * 3000))[40:]
    for off in (0, 1448):
        piece = data[off:off + 1448] if off == 0 else data[off:]
        one.send(eth() / IPv6(src=PEER, dst=A6) / IPv6ExtHdrFragment(nh=17, offset=off // 8, m=int(off == 0), id=77)
                 / piece)
    assert ep.pop() == (b"z" * 3000, ip_addr(PEER), 5)
    # Overlapping pieces: the datagram is discarded.
    for off, m in ((0, 1), (1440, 0)):
        one.send(eth() / IPv6(src=PEER, dst=A6) / IPv6ExtHdrFragment(nh=17, offset=off // 8, m=m, id=78)
                 / data[off:off + 1448 if m else None])
    assert not ep.queue and one.a.stats["drop.ipv6.frag_overlap"] == 1
    one.close()


def test_reassembly_timeout_sends_time_exceeded():
    one = One()
    _resolved(one)
    one.send(eth() / IPv6(src=PEER, dst=A6) / IPv6ExtHdrFragment(nh=17, offset=0, m=1, id=9)
             / (bytes(UDP(sport=5, dport=7, len=2000)) + b"q" * 1448))
    one.settle(61)
    (te,) = [p for p in one.out() if ICMPv6TimeExceeded in p]
    assert te[ICMPv6TimeExceeded].code == 1 and te[IPv6].dst == PEER
    assert one.a.stats["drop.ipv6.frag_timeout"] == 1
    one.close()


def test_packet_too_big_lowers_path_mtu_and_fragments_follow():
    one = One()
    _resolved(one)
    a = one.a
    ep = a.udp.endpoint()
    a.udp.bind(ep, ip_addr(A6), 4000)
    ep.sendto(b"a" * 1400, ip_addr(PEER), 9, one.net.clock.now)
    (sent,) = [p for p in one.out() if UDP in p]
    one.send(eth() / IPv6(src=PEER, dst=A6) / ICMPv6PacketTooBig(mtu=1300) / bytes(sent[IPv6])[:1232])
    assert a.ipv6.mtu(ip_addr(PEER)) == 1300 and a.stats["ipv6.pmtu_reductions"] == 1
    ep.sendto(b"b" * 1400, ip_addr(PEER), 9, one.net.clock.now)
    frags = [p for p in one.out() if IPv6ExtHdrFragment in p]
    assert len(frags) == 2 and all(len(bytes(p[IPv6])) <= 1300 for p in frags)
    # A Packet Too Big below 1280 never takes the path MTU below the IPv6 minimum (RFC 8201 4).
    one.send(eth() / IPv6(src=PEER, dst=A6) / ICMPv6PacketTooBig(mtu=600) / bytes(sent[IPv6])[:1232])
    assert a.ipv6.mtu(ip_addr(PEER)) == 1280
    one.settle(601)
    assert a.ipv6.mtu(ip_addr(PEER)) == 1500  # RFC 8201 5.3: forgotten after 10 minutes
    one.close()


def test_errors_never_answer_errors_or_multicast():
    one = One()
    _resolved(one)
    one.send(eth() / IPv6(src=PEER, dst=A6) / ICMPv6DestUnreach(code=4) / bytes(IPv6(src=A6, dst=PEER) / UDP()))
    one.send(eth("33:33:00:00:00:01") / IPv6(src=PEER, dst="ff02::1") / UDP(sport=1, dport=9))
    assert one.out() == []
    one.close()


def test_icmpv6_errors_have_a_host_wide_budget_as_well_as_one_per_destination():
    """Spoofed sources each get a fresh per-destination bucket; the host-wide one still caps the total."""
    one = One()
    try:
        budget = one.a.icmpv6.budget
        budget.global_rate, budget.global_burst = 2.0, 3.0  # before the first error makes the bucket
        for i in range(10):
            one.send(eth() / IPv6(src=f"fd00::{0x10 + i:x}", dst=A6) / UDP(sport=5, dport=9))
        stats = one.a.stats
        assert stats["icmpv6.errors_sent.type1.code4"] == 3
        assert stats["icmpv6.errors_global_limited"] == 7
        assert stats["icmpv6.errors_rate_limited"] == 0  # no destination ran out of its own tokens
        assert len(budget) == 10
    finally:
        one.close()


def _tcp6_pair(net):
    """A TCP connection fd00::1 -> fd00::2 on ``net`` (two IPv6 stacks), established."""
    a6, b6 = ip_addr("fd00::1"), ip_addr("fd00::2")
    assert net.run(lambda: a6 in net.a.iface6.preferred() and b6 in net.b.iface6.preferred(), 5)
    lst = net.b.tcp.listen((b6, 7000), 5)
    client = net.a.tcp.connect(None, (b6, 7000), net.clock.now)
    assert net.run(lambda: client.tcb.state.name == "ESTABLISHED", 5)
    return client, lst.accept(), b6


def test_tcp_forward_progress_keeps_the_next_hop_reachable_without_probes_rfc4861_7_3_1():
    """A connection whose data is ACKed keeps confirming its next hop: past every reachable time the entry
    stays (or, from DELAY, comes back to) REACHABLE with no unicast Neighbor Solicitation; a UDP flow to
    the same neighbour alone (no upper-layer confirmation) gets the DELAY -> PROBE -> NS of 7.3.3."""
    with Net(a_addr="fd00::1/64", b_addr="fd00::2/64") as net:
        client, server, b6 = _tcp6_pair(net)
        ndp = net.a.ndp
        entry = ndp.cache[b6]
        sent = net.a.stats["ndp.solicitations_sent"]
        states = set()
        got = bytearray()
        for i in range(100):  # 100 s of a chunk a second: three reachable times and more
            assert client.send(bytes([i]) * 1000, net.clock.now) == 1000
            net.run(lambda: False, 1.0)
            got += server.recv(1 << 16, net.clock.now)
            states.add(entry.state)
        assert bytes(got) == b"".join(bytes([i]) * 1000 for i in range(100))
        assert PROBE not in states
        assert net.a.stats["ndp.solicitations_sent"] == sent  # not one probe of B
        assert net.a.stats["ndp.upper_confirmed"] >= 3
        # Without progress (the connection idle, a datagram now and then) the entry is probed as before
        # (within two reachable times: progress seen at a lapse counts for the next reachable time).
        ep = net.a.udp.endpoint()
        for _ in range(70):
            ep.sendto(b"x", b6, 9, net.clock.now)
            net.run(lambda: False, 1.0)
        assert net.a.stats["ndp.solicitations_sent"] > sent


def test_progress_during_delay_makes_the_entry_reachable_at_the_delay_end():
    """RFC 4861 7.3.3 / appendix C: DELAY, then an upper-layer confirmation, is REACHABLE when the delay ends,
    instead of PROBE; without it the entry goes to PROBE and sends a unicast NS."""
    with Net(a_addr="fd00::1/64", b_addr="fd00::2/64") as net:
        client, server, b6 = _tcp6_pair(net)
        ndp, now = net.a.ndp, net.clock.now
        entry = ndp.cache[b6]
        entry.reachable_until = now  # its reachable time is up
        entry.mark = None
        assert net.a.ipv6._resolved(b6, now) is not None and entry.state == DELAY
        client.send(b"progress", now)
        assert net.run(lambda: client.tcb.snd_una == client.tcb.snd_nxt, 1)  # ACKed: forward progress
        assert server.recv(100, net.clock.now) == b"progress"
        sent = net.a.stats["ndp.solicitations_sent"]
        net.run(lambda: entry.state != DELAY, ndp.delay_first_probe + 1)
        assert entry.state == REACHABLE and net.a.stats["ndp.solicitations_sent"] == sent
        assert entry.reachable_until > net.clock.now
        # Again, this time with nothing sent: PROBE, and a probe goes out.
        entry.reachable_until = net.clock.now
        assert net.a.ipv6._resolved(b6, net.clock.now) is not None and entry.state == DELAY
        net.run(lambda: entry.state != DELAY, ndp.delay_first_probe + 1)
        assert entry.state == PROBE and net.a.stats["ndp.solicitations_sent"] == sent + 1


# -- issue 25, item 11b: an RA's Retrans Timer is bounded ---------------------------------------------------
def test_an_ra_cannot_stretch_the_retransmission_timer_to_49_days():

    from ustack.net.ndp import RETRANS_TIMER_MAX

    one = One()
    a = one.a
    one.send(eth("33:33:00:00:00:01") / IPv6(src="fe80::1", dst="ff02::1", hlim=255)
             / ICMPv6ND_RA(routerlifetime=0, retranstimer=0xFFFFFFFF, reachabletime=1))
    assert a.ndp.retrans_timer == RETRANS_TIMER_MAX == 60.0 and a.ndp.reachable_time == 0.1
    assert a.stats["ndp.ra_retrans_timer_clamped"] == 1
    one.out()
    ep = a.udp.endpoint()
    ep.sendto(b"q", ip_addr(PEER), 9, one.net.clock.now)
    a.poll(one.net.clock.now)
    one.settle(3 * 60 + 1)  # three solicitations a minute apart, then the resolution fails: not 149 days
    ns = [p for p in one.out() if ICMPv6ND_NS in p and p[ICMPv6ND_NS].tgt == PEER]
    assert len(ns) == 3 and ip_addr(PEER) not in a.ndp.cache
    one.send(eth("33:33:00:00:00:01") / IPv6(src="fe80::1", dst="ff02::1", hlim=255)
             / ICMPv6ND_RA(routerlifetime=0, retranstimer=1))
    assert a.ndp.retrans_timer == 0.010 and a.stats["ndp.ra_retrans_timer_clamped"] == 2  # Linux's floor
    one.close()
