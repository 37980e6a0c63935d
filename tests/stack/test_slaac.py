"""SLAAC address lifetimes (RFC 4862 5.5.3, 5.5.4) on the manual clock: Router Advertisements crafted with
scapy into one stack; deprecation at the preferred lifetime, removal at the valid one, the two-hour rule."""

from __future__ import annotations

from scapy.layers.inet6 import ICMPv6ND_RA, ICMPv6NDOptPrefixInfo, ICMPv6NDOptSrcLLAddr, IPv6

from ustack.net.addr import parse as ip_addr
from ustack.net.route6 import DEPRECATED, PREFERRED

from .test_ndp import PEER_MAC, One, eth

PREFIX = "fd00:42::"
HOURS = 3600.0


def ra(valid: int, preferred: int, prefix: str = PREFIX):
    return (eth("33:33:00:00:00:01") / IPv6(src="fe80::1", dst="ff02::1", hlim=255)
            / ICMPv6ND_RA(routerlifetime=1800) / ICMPv6NDOptSrcLLAddr(lladdr=PEER_MAC)
            / ICMPv6NDOptPrefixInfo(prefix=prefix, prefixlen=64, L=1, A=1, validlifetime=valid,
                                    preferredlifetime=preferred))


def slaac(one, prefix: str = PREFIX) -> list:
    return [e for e in one.a.iface6.addresses.values() if e.origin == "slaac" and e.addr[:8] == ip_addr(prefix)[:8]]


def at(one, t: float) -> None:
    """Run the stack to ``t`` seconds after ``one.t0`` (timers fire on the way)."""
    one.settle(one.t0 + t - one.net.clock.now)


def start(valid: int, preferred: int):
    one = One()
    one.t0 = one.net.clock.now
    one.send(ra(valid, preferred))
    at(one, 2)  # DAD passes
    (entry,) = slaac(one)
    assert entry.state == PREFERRED
    return one, entry


def test_deprecated_at_the_preferred_lifetime_removed_at_the_valid_lifetime():
    one, entry = start(valid=3 * 3600, preferred=3600)
    a = one.a
    dst = ip_addr("fd00:42::99")
    assert a.iface6.source(dst) == entry.addr
    at(one, 3599.9)
    assert entry.state == PREFERRED
    at(one, 3600.1)
    assert entry.state == DEPRECATED and a.stats["ndp.slaac_deprecated"] == 1
    assert entry.addr in a.iface6.valid() and entry.addr not in a.iface6.preferred()  # still receives
    assert a.iface6.source(dst) == ip_addr("fd00::1")  # new connections: the preferred one (RFC 6724 rule 3)
    at(one, 3 * HOURS - 0.1)
    assert entry.addr in a.iface6.addresses
    at(one, 3 * HOURS + 0.1)
    assert entry.addr not in a.iface6.addresses and a.stats["ndp.slaac_expired"] == 1
    assert entry.addr not in a.iface6.valid()
    one.close()


def test_a_later_preferred_lifetime_makes_a_deprecated_address_preferred_again():
    one, entry = start(valid=3 * 3600, preferred=600)
    at(one, 700)
    assert entry.state == DEPRECATED
    one.send(ra(3 * 3600, 1800))
    assert entry.state == PREFERRED and entry.preferred_until == one.net.clock.now + 1800
    at(one, 700 + 1800.1)
    assert entry.state == DEPRECATED and one.a.stats["ndp.slaac_deprecated"] == 2
    one.close()


def test_two_hour_rule_valid_lifetime_updates():
    one, entry = start(valid=10 * 3600, preferred=3600)
    now = one.net.clock.now
    # e.1: more than two hours is taken as is, shorter than before too
    one.send(ra(3 * 3600, 3600))
    assert entry.valid_until == now + 3 * HOURS
    # e.3: remaining (3 h) is more than two hours, the option says 10 minutes: two hours from now
    one.send(ra(600, 600))
    assert entry.valid_until == now + 2 * HOURS and entry.preferred_until == now + 600
    # e.2: no more than two hours remain: a shorter valid lifetime is ignored (a forged RA cannot cut it)
    one.send(ra(60, 0))
    assert entry.valid_until == now + 2 * HOURS and one.a.stats["ndp.slaac_valid_ignored"] == 1
    assert entry.state == DEPRECATED  # preferred lifetime 0: deprecated at once (always reset)
    # ... and a zero valid lifetime too
    one.send(ra(0, 0))
    assert entry.valid_until == now + 2 * HOURS
    # e.1: a valid lifetime longer than what remains is taken even under two hours
    at(one, 2 + 2 * HOURS - 100)
    one.send(ra(1000, 0))
    assert entry.valid_until == one.net.clock.now + 1000
    at(one, 2 + 2 * HOURS + 901)
    assert entry.addr not in one.a.iface6.addresses
    one.close()


def test_infinite_lifetimes_never_expire():
    one, entry = start(valid=0xFFFFFFFF, preferred=0xFFFFFFFF)
    assert entry.valid_until is None and entry.preferred_until is None
    at(one, 10 * 86400)
    assert entry.state == PREFERRED and entry.addr in one.a.iface6.addresses
    one.send(ra(3600, 1800))  # an infinite remainder is over two hours, one hour is not: e.3, two hours
    assert entry.valid_until == one.net.clock.now + 2 * HOURS
    one.close()


def test_an_address_whose_preferred_lifetime_ends_during_dad_is_deprecated_when_dad_passes():
    one = One()
    one.t0 = one.net.clock.now
    one.send(ra(3600, 0))
    (entry,) = slaac(one)
    at(one, 2)
    assert entry.state == DEPRECATED and entry.addr in one.a.iface6.valid()
    one.close()


def test_a_zero_valid_lifetime_forms_no_address():
    one = One()
    one.send(ra(0, 0))
    assert slaac(one) == []
    one.close()
