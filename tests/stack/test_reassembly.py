"""IPv4 fragment reassembly against crafted fragments (scapy), on a manual clock."""

from __future__ import annotations

import random

from scapy.layers.inet import ICMP, IP, UDP, fragment
from scapy.layers.l2 import Ether

from ustack.net.addr import ANY4, ANY6, parse as ip_addr
from ustack.net.reassembly import FRAGMENT_OVERHEAD

from .netsim import Net

A_MAC = "02:00:00:00:00:0a"
B_MAC = "02:00:00:00:00:0b"


def setup():
    net = Net()
    ep = net.a.udp.endpoint()
    net.a.udp.bind(ep, ANY4, 7000)
    net.a.arp.learn(ip_addr("198.18.0.2"), bytes.fromhex("02000000000b"), net.clock.now)
    return net, ep


def inject(net, pkt):
    net.link.a._deliver(net.clock.now, bytes(Ether(src=B_MAC, dst=A_MAC) / pkt))


def sent_by_a(net):
    """Frames a has transmitted (b's stack is never polled in these tests)."""
    out = []
    while True:
        frames = net.link.b.rx_burst(64)
        if not frames:
            return out
        out.extend(bytes(f) for f in frames)
        net.link.b.rx_release(frames)


def datagram(payload, ident=99):
    return IP(src="198.18.0.2", dst="198.18.0.1", id=ident) / UDP(sport=5000, dport=7000) / payload


def test_out_of_order_fragments_reassemble_exactly():
    net, ep = setup()
    payload = bytes(range(256)) * 16
    frags = fragment(datagram(payload), fragsize=1000)
    for f in reversed(frags):
        inject(net, f)
    net.a.poll(net.clock.now)
    assert [q[0] for q in ep.queue] == [payload]
    assert net.a.ipv4.reassembler.held == 0


def test_duplicate_fragment_is_ignored():
    net, ep = setup()
    frags = fragment(datagram(b"q" * 3000), fragsize=1000)
    for f in [frags[0], frags[0]] + frags[1:]:
        inject(net, f)
    net.a.poll(net.clock.now)
    assert [q[0] for q in ep.queue] == [b"q" * 3000]
    assert net.a.stats["ipv4.frag_duplicate"] == 1


def test_overlapping_fragments_discard_the_datagram():
    net, ep = setup()
    raw_udp = bytes(UDP(sport=5000, dport=7000, len=8 + 64) / (b"A" * 64))
    first = IP(src="198.18.0.2", dst="198.18.0.1", id=5, flags="MF", frag=0, proto=17) / raw_udp[:48]
    overlap = IP(src="198.18.0.2", dst="198.18.0.1", id=5, frag=4, proto=17) / (b"EVIL" * 10)  # starts at byte 32
    inject(net, first)
    inject(net, overlap)
    net.a.poll(net.clock.now)
    assert not ep.queue
    assert net.a.stats["drop.ipv4.frag_overlap"] == 1
    assert net.a.ipv4.reassembler.held == 0


def test_incomplete_datagram_times_out_with_icmp_time_exceeded():
    net, ep = setup()
    frags = fragment(datagram(b"t" * 3000, ident=7), fragsize=1000)
    inject(net, frags[0])
    net.a.poll(net.clock.now)
    assert net.a.ipv4.reassembler.held > 0
    net.clock.advance(30.0)
    net.a.poll(net.clock.now)
    assert net.a.stats["drop.ipv4.frag_timeout"] == 1
    assert net.a.ipv4.reassembler.held == 0
    replies = [Ether(f) for f in sent_by_a(net)]
    te = [r for r in replies if ICMP in r and r[ICMP].type == 11]
    assert len(te) == 1 and te[0][ICMP].code == 1
    quoted = te[0][ICMP].payload
    assert bytes(quoted)[:20] == bytes(frags[0])[:20]


def test_memory_bound_evicts_the_oldest_and_the_newest_completes():
    net, ep = setup()
    net.a.ipv4.reassembler.max_bytes = 5000
    for ident in range(10):
        inject(net, fragment(datagram(b"m" * 3000, ident=ident), fragsize=1000)[0])
    net.a.poll(net.clock.now)
    r = net.a.ipv4.reassembler
    assert r.held <= 5000 and net.a.stats["drop.ipv4.frag_evicted"] > 0
    assert (ip_addr("198.18.0.2"), ip_addr("198.18.0.1"), 17, 9) in r.datagrams  # the newest is kept
    for f in fragment(datagram(b"m" * 3000, ident=9), fragsize=1000)[1:]:
        inject(net, f)
    net.a.poll(net.clock.now)
    assert [p for p, _, _ in ep.queue] == [b"m" * 3000]


def test_a_full_table_evicts_the_oldest_so_new_datagrams_still_reassemble():
    """Lone first fragments cannot block fragmented receive for the whole timeout (issue 12, item 6)."""
    net, ep = setup()
    net.a.ipv4.reassembler.max_datagrams = 4
    for ident in range(6):
        inject(net, fragment(datagram(b"m" * 3000, ident=ident), fragsize=1000)[0])
    net.a.poll(net.clock.now)
    assert len(net.a.ipv4.reassembler.datagrams) == 4
    assert net.a.stats["drop.ipv4.frag_evicted"] == 2 and net.a.stats["drop.ipv4.frag_memory"] == 0
    for f in fragment(datagram(b"n" * 2500, ident=50), fragsize=1000):
        inject(net, f)
    net.a.poll(net.clock.now)
    assert [p for p, _, _ in ep.queue] == [b"n" * 2500]


def test_one_source_cannot_fill_the_table():
    net, ep = setup()
    r = net.a.ipv4.reassembler
    for ident in range(r.max_per_source + 4):
        inject(net, fragment(datagram(b"m" * 3000, ident=ident), fragsize=1000)[0])
    net.a.poll(net.clock.now)
    assert len(r.datagrams) == r.max_per_source and net.a.stats["drop.ipv4.frag_source_evicted"] == 4
    assert sorted(k[3] for k in r.datagrams) == list(range(4, r.max_per_source + 4))  # the source's newest kept
    other = IP(src="198.18.0.3", dst="198.18.0.1", id=7) / UDP(sport=5001, dport=7000) / (b"o" * 2500)
    for f in fragment(other, fragsize=1000):
        inject(net, f)
    net.a.poll(net.clock.now)
    assert [(p, sport) for p, _, sport in ep.queue] == [(b"o" * 2500, 5001)]


# -- issue 25, item 9: a spoofed flood from a client's address must not lock the client out -------------------
def test_spoofed_lone_first_fragments_do_not_lock_out_the_real_client_ipv4():
    net, ep = setup()
    r = net.a.ipv4.reassembler
    for ident in range(300):  # lone first fragments "from" the real client 198.18.0.2
        inject(net, fragment(datagram(b"s" * 3000, ident=ident), fragsize=1000)[0])
        if ident % 50 == 49:
            net.a.poll(net.clock.now)
            assert len(r.datagrams) <= r.max_per_source and r.held <= r.max_per_source * (1000 + FRAGMENT_OVERHEAD)
    net.a.poll(net.clock.now)
    payload = bytes(i * 13 % 256 for i in range(3000))
    for f in fragment(datagram(payload, ident=4000), fragsize=1480):  # at once, not 30 s later
        inject(net, f)
    net.a.poll(net.clock.now)
    assert [(p, sport) for p, _, sport in ep.queue] == [(payload, 5000)]
    assert net.a.stats["drop.ipv4.frag_source_evicted"] == 300 - r.max_per_source + 1
    assert net.a.stats["drop.ipv4.frag_stale"] == 0 and net.a.stats["ipv4.reassembled"] == 1
    assert len(r.datagrams) == r.max_per_source - 1 and r.held <= r.max_bytes


def test_spoofed_lone_first_fragments_do_not_lock_out_the_real_client_ipv6():
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment

    from tests.stack.test_ipv6 import A6, net6

    with net6() as net:
        srv = net.a.udp.endpoint()
        net.a.udp.bind(srv, ANY6, 7000)
        r = net.a.ipv6.reassembler
        udp = bytes(UDP(sport=5000, dport=7000, len=8 + 3000) / (b"s" * 3000))
        for ident in range(300):
            spoof = (Ether(src=net.b.iface.mac.hex(":"), dst=net.a.iface.mac.hex(":"))
                     / IPv6(src="fd00::2", dst="fd00::1") / IPv6ExtHdrFragment(nh=17, m=1, offset=0, id=ident)
                     / udp[:1000])
            net.link.a._deliver(net.clock.now, bytes(spoof))
            if ident % 50 == 49:
                net.a.poll(net.clock.now)
        net.a.poll(net.clock.now)
        assert len(r.datagrams) == r.max_per_source and r.held <= r.max_per_source * (1000 + FRAGMENT_OVERHEAD)
        cli = net.b.udp.endpoint()
        payload = bytes(i * 13 % 256 for i in range(3000))
        cli.sendto(payload, A6, 7000, net.clock.now)  # the real client: fragmented by its own stack
        net.run(lambda: srv.queue, 5)
        assert srv.pop()[0] == payload
        assert net.a.stats["drop.ipv6.frag_source_evicted"] == 300 - r.max_per_source + 1
        assert net.a.stats["ipv6.reassembled"] == 1


def test_max_dist_flushes_a_datagram_its_source_has_moved_on_from():
    """ipfrag_max_dist: 64 fragments later from the same source, an abandoned datagram goes (not in 30 s)."""
    net, ep = setup()
    r = net.a.ipv4.reassembler
    inject(net, fragment(datagram(b"a" * 3000, ident=1), fragsize=1000)[0])  # abandoned by its sender
    net.a.poll(net.clock.now)
    for ident in range(100, 132):  # 32 datagrams of 2 fragments: 64 fragments, the abandoned one still held
        for f in fragment(datagram(b"k" * 1500, ident=ident), fragsize=1000):
            inject(net, f)
        net.a.poll(net.clock.now)
    assert net.a.stats["drop.ipv4.frag_stale"] == 0 and len(r.datagrams) == 1
    inject(net, fragment(datagram(b"k" * 1500, ident=200), fragsize=1000)[0])  # the 65th fragment since
    net.a.poll(net.clock.now)
    assert net.a.stats["drop.ipv4.frag_stale"] == 1
    assert [k[3] for k in r.datagrams] == [200] and r.held == 1000 + FRAGMENT_OVERHEAD
    assert len(ep.queue) == 32 and net.a.stats["drop.ipv4.frag_timeout"] == 0


def test_fragments_are_charged_their_bookkeeping_too():
    net, ep = setup()
    inject(net, fragment(datagram(b"m" * 3000, ident=3), fragsize=1000)[0])
    net.a.poll(net.clock.now)
    assert net.a.ipv4.reassembler.held == 1000 + FRAGMENT_OVERHEAD


def test_a_datagram_of_tiny_fragments_in_random_order_reassembles_exactly():
    net, ep = setup()
    payload = bytes(i % 251 for i in range(8000))
    frags = fragment(datagram(payload, ident=11), fragsize=8)
    random.Random(5).shuffle(frags)
    for f in frags:
        inject(net, f)
    while net.link.a.poll_at(net.clock.now) is not None:  # 64 frames per round: poll until the link is drained
        net.a.poll(net.clock.now)
    assert [p for p, _, _ in ep.queue] == [payload]
    assert net.a.ipv4.reassembler.held == 0


def test_fragment_past_65535_is_dropped():
    net, ep = setup()
    inject(net, IP(src="198.18.0.2", dst="198.18.0.1", id=9, frag=8190, proto=17) / (b"x" * 100))
    net.a.poll(net.clock.now)
    assert net.a.stats["drop.ipv4.frag_too_long"] == 1


def test_reassembled_datagram_with_bad_udp_checksum_is_dropped():
    net, ep = setup()
    pkt = IP(bytes(datagram(b"c" * 3000)))
    raw = bytearray(bytes(pkt))
    raw[-1] ^= 0xFF  # corrupt the payload after the checksum was computed
    for f in fragment(IP(bytes(raw)), fragsize=1000):
        inject(net, f)
    net.a.poll(net.clock.now)
    assert not ep.queue
    assert net.a.stats["drop.udp.bad_checksum"] == 1
