"""No ICMP or ICMPv6 error in reply to a link-layer broadcast or multicast frame (issue 25 item 4): RFC 1122
3.2.2 ("a datagram sent as a link-layer broadcast"), RFC 4443 2.4 (e.3) ("a packet sent as a link-layer
multicast" or broadcast). The datagram's IP destination is our unicast address; only the frame's
destination MAC says it was sent to everyone, so the classify record carries it (``Packet.link_group``)."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt
from scapy.layers.l2 import Ether

from ustack.net.addr import parse

from tests.stack.netsim import Net

A_MAC, B_MAC = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
A_IP, B_IP, A6, B6 = "198.18.0.1", "198.18.0.2", "fd00::1", "fd00::2"
GROUP_MACS = ["ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:01", "33:33:00:00:00:01"]


def _net(ipv6: bool = False) -> Net:
    if not ipv6:
        net = Net()
    else:
        net = Net(a_addr=["198.18.0.1/24", "fd00::1/64"], b_addr=["198.18.0.2/24", "fd00::2/64"])
        assert net.run(lambda: parse(A6) in net.a.iface6.preferred() and parse(B6) in net.b.iface6.preferred(), 5)
    net.run(max_time=1.0)
    return net


def _inject(net, frame) -> None:
    net.link.a._deliver(net.clock.now, bytes(frame))
    net.run(max_time=1.0)  # long enough for ARP/ND toward B and the error to leave


V4_CASES = {
    "udp": lambda: IP(src=B_IP, dst=A_IP) / UDP(sport=5000, dport=9) / b"closed",
    "fragmented-udp": lambda: IP(src=B_IP, dst=A_IP, id=7) / UDP(sport=5000, dport=9) / (b"f" * 100),
    "protocol": lambda: IP(src=B_IP, dst=A_IP, proto=253) / b"unknown protocol",
}
V4_ERRORS = {"udp": "type3.code3", "fragmented-udp": "type3.code3", "protocol": "type3.code2"}


def _v4_frames(case, dst_mac):
    pkt = V4_CASES[case]()
    if case == "fragmented-udp":
        from scapy.layers.inet import fragment
        return [Ether(src=B_MAC, dst=dst_mac) / f for f in fragment(pkt, 64)]
    return [Ether(src=B_MAC, dst=dst_mac) / pkt]


@pytest.mark.parametrize("case", sorted(V4_CASES))
def test_ipv4_error_only_to_a_unicast_frame(case):
    net = _net()
    for f in _v4_frames(case, A_MAC):
        _inject(net, f)
    sent = f"icmp.errors_sent.{V4_ERRORS[case]}"
    assert net.a.stats[sent] == 1  # the control: to our MAC, the error goes
    for n, mac in enumerate(GROUP_MACS[:2], start=1):
        net.clock.set(net.clock.now + 10.0)  # the per-destination bucket full again
        for f in _v4_frames(case, mac):
            _inject(net, f)
        assert net.a.stats[sent] == 1, mac
        assert net.a.stats["icmp.no_error_to_link_group"] == n


V6_CASES = {
    "udp": lambda: IPv6(src=B6, dst=A6) / UDP(sport=5000, dport=9) / b"closed",
    "udp-after-extension-header": lambda: IPv6(src=B6, dst=A6) / IPv6ExtHdrDestOpt() / UDP(sport=5000, dport=9) / b"x",
    "unknown-next-header": lambda: IPv6(src=B6, dst=A6, nh=253) / b"unknown next header",
}
V6_ERRORS = {"udp": "type1.code4", "udp-after-extension-header": "type1.code4", "unknown-next-header": "type4.code1"}


@pytest.mark.parametrize("case", sorted(V6_CASES))
def test_ipv6_error_only_to_a_unicast_frame(case):
    net = _net(ipv6=True)
    _inject(net, Ether(src=B_MAC, dst=A_MAC) / V6_CASES[case]())
    sent = f"icmpv6.errors_sent.{V6_ERRORS[case]}"
    assert net.a.stats[sent] == 1
    for n, mac in enumerate(["33:33:00:00:00:01", "ff:ff:ff:ff:ff:ff"], start=1):
        net.clock.set(net.clock.now + 10.0)
        _inject(net, Ether(src=B_MAC, dst=mac) / V6_CASES[case]())
        assert net.a.stats[sent] == 1, mac
        assert net.a.stats["icmpv6.no_error_to_link_group"] == n
