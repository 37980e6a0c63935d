"""Issue 12, item 5: martian sources (RFC 1812 5.3.7, RFC 1122 3.2.1.3) are dropped at the
network layer, by name, before a transport sees them; nothing is sent back."""

from __future__ import annotations

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP

from ustack.net.addr import ANY4

from .frames import A_IP, B_IP, E, drops, fresh, inject


@pytest.mark.parametrize("src, reason", [
    ("255.255.255.255", "broadcast"),
    ("198.18.0.255", "broadcast"),       # our subnet's broadcast
    ("224.0.0.1", "multicast"),
    ("240.0.0.1", "reserved"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "this_network"),
    ("127.0.0.1", "loopback"),
    (A_IP, "ours"),                      # LAND
])
def test_syn_from_martian_source_gets_nothing(src, reason):
    net, _, lst = fresh()
    arp_before = net.a.stats["arp.requests_sent"]
    assert inject(net, E / IP(src=src, dst=A_IP) / TCP(sport=80, dport=80, flags="S", seq=1)) == 0
    assert drops(net, "ipv4.martian_source." + reason) == 1
    assert lst.half_open == 0 and not net.a.tcp.connections
    assert net.a.stats["arp.requests_sent"] == arp_before  # LAND: no ARP for ourselves


@pytest.mark.parametrize("src", ["255.255.255.255", "198.18.0.255", "127.0.0.1", A_IP])
def test_echo_request_from_martian_source_gets_no_reply(src):
    net, _, _ = fresh()
    assert inject(net, E / IP(src=src, dst=A_IP) / ICMP(type=8, id=1, seq=1) / b"x") == 0
    assert net.a.stats["icmp.echo_requests_received"] == 0
    assert sum(v for k, v in net.a.stats.drops().items() if k.startswith("ipv4.martian_source.")) == 1


def test_udp_and_fragments_from_martian_sources_are_not_delivered():
    net, ep, _ = fresh()
    inject(net, E / IP(src="127.0.0.1", dst=A_IP) / UDP(sport=5, dport=7) / b"spoof",
           E / IP(src="224.0.0.9", dst=A_IP, flags="MF", id=3, proto=17) / (b"f" * 64))
    assert not ep.queue
    assert net.a.ipv4.reassembler.held == 0
    assert drops(net, "ipv4.martian_source.loopback") == 1 and drops(net, "ipv4.martian_source.multicast") == 1


def test_dhcp_client_from_unspecified_source_is_let_through():
    # RFC 1122 3.2.1.3 (a) / RFC 2131 4.1: a client with no address yet sends from 0.0.0.0:68 to :67.
    net, _, _ = fresh()
    server = net.a.udp.endpoint()
    net.a.udp.bind(server, ANY4, 67)
    inject(net, E / IP(src="0.0.0.0", dst="255.255.255.255") / UDP(sport=68, dport=67) / b"DISCOVER")
    assert [p for p, _, _ in server.queue] == [b"DISCOVER"]
    inject(net, E / IP(src="0.0.0.0", dst="255.255.255.255") / UDP(sport=68, dport=7) / b"not dhcp")
    assert drops(net, "ipv4.martian_source.unspecified") == 1


def test_ordinary_source_is_not_martian():
    net, ep, _ = fresh()
    inject(net, E / IP(src=B_IP, dst=A_IP) / UDP(sport=5, dport=7) / b"hello")
    assert [p for p, _, _ in ep.queue] == [b"hello"]
    assert not any(k.startswith("ipv4.martian") for k in net.a.stats.drops())


def test_icmp_rate_limit_map_is_capped_by_evicting_the_oldest():
    net, _, _ = fresh()
    icmp = net.a.icmp
    icmp.budget.max_buckets = 4
    for i in range(10, 16):  # six sources on the subnet, each to a closed UDP port
        inject(net, E / IP(src=f"198.18.0.{i}", dst=A_IP) / UDP(sport=5, dport=9))
    assert len(icmp.budget._buckets) == 4
    assert net.a.stats["icmp.ratelimit_evicted"] == 2
    assert list(icmp.budget._buckets) == [bytes([198, 18, 0, i]) for i in range(12, 16)]  # the newest kept


def test_icmp_errors_have_a_host_wide_budget_spoofed_sources_cannot_multiply():
    """Each new source gets a fresh per-destination bucket; the global one (burst 3 here) still holds."""
    net, _, _ = fresh()
    icmp = net.a.icmp
    icmp.budget.global_rate, icmp.budget.global_burst = 2.0, 3.0
    for i in range(10, 20):  # ten sources, one closed-port datagram each, at one instant
        inject(net, E / IP(src=f"198.18.0.{i}", dst=A_IP) / UDP(sport=5, dport=9))
    stats = net.a.stats
    assert stats["icmp.errors_sent.type3.code3"] == 3
    assert stats["icmp.errors_global_limited"] == 7
    assert stats["icmp.errors_rate_limited"] == 0  # no destination ran out of its own tokens
    net.clock.advance(1.0)  # two more tokens a second
    for i in range(20, 25):
        inject(net, E / IP(src=f"198.18.0.{i}", dst=A_IP) / UDP(sport=5, dport=9))
    assert stats["icmp.errors_sent.type3.code3"] == 5
    assert stats["icmp.errors_global_limited"] == 10
