"""ICMPv6 Redirect (RFC 4861 section 8) with scapy-built messages on the manual clock: validation (8.1),
each refusal a named drop, and the destination cache and neighbour entry a valid one sets (8.3)."""

from __future__ import annotations

import pytest
from scapy.layers.inet6 import UDP, ICMPv6ND_Redirect, ICMPv6NDOptDstLLAddr, ICMPv6NDOptRedirectedHdr, IPv6
from scapy.layers.inet6 import in6_chksum
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from ustack.api.clock import ManualClock
from ustack.backends.pipe import PipeLink
from ustack.net.addr import ANY6, parse as ip_addr
from ustack.net.ndp import STALE
from ustack.stack import Stack

A_MAC = "02:00:00:00:00:0a"
ROUTER_MAC, NEW_ROUTER_MAC, HOST_MAC = "02:00:00:00:00:01", "02:00:00:00:00:99", "02:00:00:00:00:55"
ROUTER, NEW_ROUTER, A = "fe80::1", "fe80::99", "fd00::1"
FAR, NEAR = "2001:db8::5", "2001:db8::6"  # off-link destinations: through ROUTER until redirected


class Host:
    """One stack (fd00::1/64, default router fe80::1) whose frames out are read from the other pipe end."""

    def __init__(self, **ndp):
        self.clock = ManualClock(100.0)
        self.link = PipeLink(self.clock)
        self.stack = Stack(self.link.a, "fd00::1/64", gateway6=ROUTER, ipv6={"ndp": ndp})
        self.run(3.0)  # DAD
        assert ip_addr(A) in self.stack.iface6.preferred()
        self.sent()

    def run(self, seconds: float) -> None:
        end = self.clock.now + seconds
        while self.clock.now < end:
            self.stack.poll(self.clock.now)
            self.clock.advance(0.1)

    def inject(self, frame) -> None:
        self.link.a._deliver(self.clock.now, bytes(frame))
        self.stack.poll(self.clock.now)

    def sent(self) -> list:
        frames = self.link.b.rx_burst(64)
        out = [Ether(bytes(f)) for f in frames]
        self.link.b.rx_release(frames)
        return out

    def drops(self, reason: str) -> int:
        return self.stack.stats["drop." + reason]

    def close(self):
        self.link.close()


@pytest.fixture
def host():
    h = Host()
    yield h
    assert h.stack.stats["stack.internal_error"] == 0
    h.close()


def redirect(target=NEW_ROUTER, dest=FAR, src=ROUTER, hlim=255, code=0, lla=NEW_ROUTER_MAC, dst=A):
    msg = ICMPv6ND_Redirect(tgt=target, dst=dest, code=code)
    if lla is not None:
        msg = msg / ICMPv6NDOptDstLLAddr(lladdr=lla)
    quoted = IPv6(src=A, dst=dest) / UDP(sport=5000, dport=7)
    return Ether(src=ROUTER_MAC, dst=A_MAC) / IPv6(src=src, dst=dst, hlim=hlim) / msg / ICMPv6NDOptRedirectedHdr(
        pkt=bytes(quoted))


def send_udp(host, dest: str) -> None:
    ep = host.stack.udp.endpoint()
    host.stack.udp.bind(ep, ANY6, 0)
    ep.sendto(b"where to?", ip_addr(dest), 7, host.clock.now)
    host.stack.poll(host.clock.now)


def test_valid_redirect_to_another_router_is_applied(host):
    s = host.stack
    assert s.iface6.next_hop(ip_addr(FAR), host.clock.now) == ip_addr(ROUTER)
    host.inject(redirect())
    assert s.stats["ndp.redirects_applied"] == 1
    assert s.iface6.next_hop(ip_addr(FAR), host.clock.now) == ip_addr(NEW_ROUTER)
    n = s.ndp.cache[ip_addr(NEW_ROUTER)]
    assert (n.state, n.mac, n.router) == (STALE, bytes.fromhex(NEW_ROUTER_MAC.replace(":", "")), True)
    # Traffic for FAR now leaves to the new router's MAC; other destinations still go through ROUTER.
    send_udp(host, FAR)
    out = [f for f in host.sent() if UDP in f]
    assert len(out) == 1 and out[0].dst == NEW_ROUTER_MAC and out[0][IPv6].dst == FAR
    assert s.iface6.next_hop(ip_addr(NEAR), host.clock.now) == ip_addr(ROUTER)
    # The destination cache entry lasts redirect_lifetime (600 s), then the default router is used again.
    host.clock.advance(601)
    assert s.iface6.next_hop(ip_addr(FAR), host.clock.now) == ip_addr(ROUTER)


def test_redirect_to_the_destination_itself_makes_it_on_link(host):
    s = host.stack
    host.inject(redirect(target=FAR, lla=HOST_MAC))
    assert s.stats["ndp.redirects_applied"] == 1
    assert s.iface6.next_hop(ip_addr(FAR), host.clock.now) == ip_addr(FAR)
    n = s.ndp.cache[ip_addr(FAR)]
    assert n.mac == bytes.fromhex(HOST_MAC.replace(":", "")) and n.router is False
    send_udp(host, FAR)
    out = [f for f in host.sent() if UDP in f]
    assert len(out) == 1 and out[0].dst == HOST_MAC


def test_redirect_without_a_link_layer_option_resolves_the_target(host):
    s = host.stack
    host.inject(redirect(lla=None))
    assert s.stats["ndp.redirects_applied"] == 1 and ip_addr(NEW_ROUTER) not in s.ndp.cache
    send_udp(host, FAR)
    ns = [f for f in host.sent() if f.haslayer("ICMPv6ND_NS")]
    assert ns and ns[0]["ICMPv6ND_NS"].tgt == NEW_ROUTER


@pytest.mark.parametrize("kw, reason", [
    ({"src": "fd00::77"}, "ndp.redirect_not_link_local"),
    ({"src": "fe80::2"}, "ndp.redirect_not_from_router"),  # not our first hop for FAR
    ({"dest": "fd00::8", "target": "fe80::99"}, "ndp.redirect_not_from_router"),  # on-link: no router to redirect
    ({"hlim": 64}, "ndp.bad_hop_limit"),
    ({"code": 1}, "ndp.bad_code"),
    ({"dest": "ff02::1"}, "ndp.redirect_bad_destination"),
    ({"target": "2001:db8::9"}, "ndp.redirect_bad_target"),  # neither link-local nor the destination
    ({"target": "ff02::2"}, "ndp.redirect_bad_target"),
    ({"lla": "01:00:5e:00:00:01"}, "ndp.bad_lla"),
])
def test_invalid_redirects_are_named_drops_and_change_nothing(host, kw, reason):
    s = host.stack
    before = s.iface6.next_hop(ip_addr(kw.get("dest", FAR)), host.clock.now)
    host.inject(redirect(**kw))
    assert host.drops(reason) == 1, s.stats.drops()
    assert s.stats["ndp.redirects_applied"] == 0 and s.iface6.redirects == {}
    assert s.iface6.next_hop(ip_addr(kw.get("dest", FAR)), host.clock.now) == before


def hand_made(icmp: bytes) -> bytes:
    """An ICMPv6 message edited by hand, in a frame from the router, its checksum recomputed."""
    ip = IPv6(src=ROUTER, dst=A, hlim=255, nh=58)
    icmp = bytearray(icmp)
    icmp[2:4] = b"\0\0"
    icmp[2:4] = in6_chksum(58, ip, bytes(icmp)).to_bytes(2, "big")
    return bytes(Ether(src=ROUTER_MAC, dst=A_MAC) / ip / Raw(bytes(icmp)))


def test_short_redirect_and_zero_length_option_are_dropped(host):
    s = host.stack
    whole = bytes(redirect(lla=None)[ICMPv6ND_Redirect])
    host.inject(hand_made(whole[:24]))  # 24 octets of ICMP: under RFC 4861's 40
    assert host.drops("ndp.bad_length") == 1
    zero = bytearray(whole)
    zero[41] = 0  # the redirected-header option with length 0
    host.inject(hand_made(zero))
    assert host.drops("ndp.bad_option") == 1
    assert s.iface6.redirects == {} and s.stats["ndp.redirects_applied"] == 0
    host.inject(hand_made(whole))  # the same message intact: applied
    assert s.stats["ndp.redirects_applied"] == 1


def test_accept_redirects_off_drops_them_as_ignored():
    h = Host(accept_redirects=False)
    try:
        h.inject(redirect())
        assert h.drops("ndp.redirect_ignored") == 1 and h.stack.iface6.redirects == {}
    finally:
        h.close()


def test_redirect_table_is_bounded():
    from ustack.net.route6 import MAX_REDIRECTS

    h = Host()
    try:
        for i in range(MAX_REDIRECTS + 5):
            h.inject(redirect(dest=f"2001:db8:1::{i + 1:x}"))
        assert len(h.stack.iface6.redirects) == MAX_REDIRECTS
        assert h.stack.stats["ndp.redirect_evicted"] == 5
        assert ip_addr("2001:db8:1::1") not in h.stack.iface6.redirects
    finally:
        h.close()
