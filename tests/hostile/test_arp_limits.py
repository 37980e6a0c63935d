"""Issue 12, items 2 and 4: the neighbour cache and the resolution queue under remote traffic.

Only on-link unicast senders are learned; the cache is capped (expired
entries first, then the oldest) and purged by a timer; resolution checks its
limits before creating anything, caps the pending table and rate-limits its
broadcasts, so spoofed on-link sources cannot amplify a flood into ARP.
"""

from __future__ import annotations

from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import ARP, Ether

from ustack.net.addr import parse as ip_addr

from .frames import A_IP, B_IP, B_MAC, E, drops, fresh, inject


def arp_to_a(psrc, hwsrc=B_MAC, op=1, pdst=A_IP):
    return Ether(src=B_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(op=op, psrc=psrc, pdst=pdst, hwsrc=hwsrc)


def test_off_link_sender_is_neither_learned_nor_answered():
    net, _, _ = fresh()
    assert inject(net, arp_to_a("10.9.9.9"), arp_to_a("10.9.9.10", op=2)) == 0
    assert drops(net, "arp.sender_off_link") == 2
    assert ip_addr("10.9.9.9") not in net.a.arp.cache and ip_addr("10.9.9.10") not in net.a.arp.cache


def test_subnet_broadcast_sender_and_multicast_mac_are_dropped():
    net, _, _ = fresh()
    assert inject(net, arp_to_a("198.18.0.255"), arp_to_a("198.18.0.0")) == 0
    assert drops(net, "arp.sender_not_unicast") == 2
    # A broadcast sender MAC would have us unicast our reply to everyone.
    assert inject(net, arp_to_a("198.18.0.7", hwsrc="ff:ff:ff:ff:ff:ff"), arp_to_a("198.18.0.8", hwsrc="01:00:5e:00:00:01")) == 0
    assert drops(net, "arp.sender_bad_mac") == 2
    assert not net.a.arp.cache


def test_probe_for_our_address_is_answered_not_learned():
    net, _, _ = fresh()
    assert inject(net, arp_to_a("0.0.0.0")) == 1  # RFC 5227: we defend our address
    assert net.a.stats["arp.probes_received"] == 1
    assert not net.a.arp.cache


def test_on_link_request_is_learned_and_answered():
    net, _, _ = fresh()
    assert inject(net, arp_to_a("198.18.0.2")) == 1
    assert net.a.arp.lookup(ip_addr("198.18.0.2"), net.clock.now) == bytes.fromhex("02000000000b")


def test_cache_is_capped_and_keeps_the_newest():
    net, _, _ = fresh()
    arp = net.a.arp
    arp.max_entries = 8
    for i in range(10, 30):
        inject(net, arp_to_a(f"198.18.0.{i}", hwsrc=f"02:00:00:00:01:{i:02x}"))
    assert len(arp.cache) == 8
    assert net.a.stats["arp.cache_full"] == 12 and net.a.stats["arp.evicted"] == 12
    assert list(arp.cache) == [ip_addr(f"198.18.0.{i}") for i in range(22, 30)]
    assert [ip for ip, _, _ in arp.entries(net.clock.now)] == [f"198.18.0.{i}" for i in range(22, 30)]


def test_cap_evicts_expired_entries_before_live_ones():
    net, _, _ = fresh()
    arp = net.a.arp
    arp.max_entries = 4
    inject(net, arp_to_a("198.18.0.10"))
    net.clock.advance(30)
    for i in (11, 12, 13):
        inject(net, arp_to_a(f"198.18.0.{i}"))
    arp._purge_timer.cancel()  # leave the expired one for the cap to find
    net.clock.advance(31)  # .10 has expired, the others have not
    inject(net, arp_to_a("198.18.0.14"))
    assert net.a.stats["arp.evicted"] == 0 and net.a.stats["arp.expired"] == 1
    assert list(arp.cache) == [ip_addr(f"198.18.0.{i}") for i in (11, 12, 13, 14)]


def test_expired_entries_are_purged_by_a_timer_without_lookups():
    net, _, _ = fresh()
    for i in range(10, 15):
        inject(net, arp_to_a(f"198.18.0.{i}"))
    assert len(net.a.arp.cache) == 5
    net.clock.advance(61)
    net.a.poll(net.clock.now)
    assert len(net.a.arp.cache) == 5  # stale (past the ttl): kept while they could be polled
    net.clock.advance(net.a.arp.stale_time)
    net.a.poll(net.clock.now)
    assert not net.a.arp.cache
    assert net.a.stats["arp.expired"] == 5
    assert net.a.arp._purge_timer.deadline is None  # an empty cache keeps no deadline


def test_syn_flood_from_spoofed_on_link_sources_does_not_amplify_into_arp():
    # 5,000 SYNs from distinct on-link sources: each SYN-ACK (or cookie) needs ARP for its source.
    net, _, lst = fresh(a_addr="198.18.0.1/16", b_addr="198.18.0.2/16")
    arp = net.a.arp
    frames = [bytes(E / IP(src=f"198.18.{1 + (i >> 8)}.{i & 0xFF}", dst=A_IP) / TCP(sport=1000, dport=80, flags="S", seq=1))
              for i in range(5000)]
    for i in range(0, len(frames), 32):
        inject(net, *frames[i:i + 32])
    assert len(arp.pending) <= arp.max_pending
    assert drops(net, "arp.pending_full") > 0
    for _ in range(20):  # ten seconds of retries
        net.clock.advance(0.5)
        net.a.poll(net.clock.now)
    # At most the bucket's burst plus its rate over the ten seconds, never 4 per spoofed source.
    assert net.a.stats["arp.requests_sent"] <= 50 + 50 * 10 + 1
    assert net.a.stats["arp.requests_rate_limited"] > 0
    assert arp.queued <= arp.queue_total


def test_limits_are_checked_before_anything_is_created():
    net, _, _ = fresh()
    arp = net.a.arp
    arp.queue_total = 0  # no room at all: nothing may be created, nothing broadcast
    before = net.a.stats["arp.requests_sent"]
    arp.resolve_then(ip_addr("198.18.0.50"), lambda mac: None, net.clock.now)
    assert not arp.pending and arp.queued == 0
    assert net.a.stats["arp.requests_sent"] == before
    assert drops(net, "arp.queue_full") == 1


def test_caps_are_stack_constructor_keywords():
    from ustack.api.clock import ManualClock
    from ustack.backends.pipe import PipeLink
    from ustack.stack import Stack

    clock = ManualClock(1.0)
    link = PipeLink(clock)
    s = Stack(link.a, "198.18.0.1/24", arp={"max_entries": 3, "max_pending": 2, "request_rate": 1.0,
                                             "request_burst": 1.0},
              icmp={"max_buckets": 5}, udp={"datagram_overhead": 100}, ipv4={"allow_unspecified_dhcp": False})
    assert (s.arp.max_entries, s.arp.max_pending, s.arp.ttl) == (3, 2, 60.0)
    assert s.icmp.budget.max_buckets == 5 and s.udp.datagram_overhead == 100 and not s.ipv4.allow_unspecified_dhcp
    # The request bucket holds one token: the second new next hop's request waits for its retry.
    s.arp.resolve_then(bytes([198, 18, 0, 7]), lambda mac: None, clock.now)
    s.arp.resolve_then(bytes([198, 18, 0, 8]), lambda mac: None, clock.now)
    assert s.stats["arp.requests_sent"] == 1 and s.stats["arp.requests_rate_limited"] == 1
    s.arp.resolve_then(bytes([198, 18, 0, 9]), lambda mac: None, clock.now)
    assert s.stats["drop.arp.pending_full"] == 1
    link.close()


def test_a_known_neighbour_stays_reachable_while_spoofed_sources_hold_every_pending_slot():
    """The SYN flood over veth found it: once the legitimate peer's entry passed its ttl, re-resolving it
    needed a pending slot (all held by spoofed sources) and a broadcast (the budget spent on them).
    A stale entry is used and polled by unicast instead (RFC 1122 2.3.2.1)."""
    from tests.stack.test_icmp_arp import ping

    net, _, _ = fresh(a_addr="198.18.0.1/16", b_addr="198.18.0.2/16")
    arp = net.a.arp
    net.b.arp.ttl = 1000.0  # B keeps A: only A has to find B again
    assert ping(net, net.b, ip_addr(A_IP))  # A learns B
    net.clock.advance(arp.ttl + 0.5)  # A's entry for B is stale now
    spoofed = [bytes(E / IP(src=f"198.18.{1 + (i >> 8)}.{i & 0xFF}", dst=A_IP) / TCP(sport=1000, dport=80, flags="S"))
               for i in range(400)]
    for i in range(0, len(spoofed), 32):
        inject(net, *spoofed[i:i + 32])
    assert len(arp.pending) == arp.max_pending and drops(net, "arp.pending_full") > 0
    got = ping(net, net.b, ip_addr(A_IP), count=3)
    assert [seq for seq, _, _, _ in got] == [0, 1, 2]  # B is still answered
    assert net.a.stats["arp.unicast_polls_sent"] == 1
    b_ip = ip_addr(B_IP)
    assert net.run(lambda: arp.cache[b_ip][1] > net.clock.now, 1.0)  # B answered the poll: fresh again
