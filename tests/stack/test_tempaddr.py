"""RFC 8981 temporary addresses on the manual clock: made beside the SLAAC address from a Router Advertisement
(scapy-built), their lifetimes (TEMP_VALID/PREFERRED_LIFETIME, DESYNC_FACTOR), regeneration REGEN_ADVANCE
before deprecation, deprecated addresses not chosen for new connections (RFC 6724 rule 3) but kept by existing
ones, removal at the end of the valid lifetime; DAD conflicts, short prefixes, the modes."""

from __future__ import annotations

import random

import pytest
from scapy.layers.inet6 import ICMPv6ND_NA, ICMPv6ND_RA, ICMPv6NDOptDstLLAddr, ICMPv6NDOptPrefixInfo, IPv6
from scapy.layers.l2 import Ether

from ustack.net.addr import ANY6, parse as ip_addr, to_str
from ustack.net.route6 import DEPRECATED, PREFERRED, TENTATIVE, solicited_node
from ustack.net.tempaddr import TEMP_IDGEN_RETRIES

from .netsim import Net
from .test_ipv6 import _pump

ROUTER_MAC = "02:00:00:00:00:01"
B = ip_addr("2001:db8:1::2")
VALID, PREFERRED_LT = 100.0, 50.0  # TEMP_VALID_LIFETIME, TEMP_PREFERRED_LIFETIME for the tests
REGEN_ADVANCE = 2 + TEMP_IDGEN_RETRIES * 1 * 1.0  # one DAD transmission, 1 s retransmission timer


def pair(mode: int = 2):
    ndp = {"use_tempaddr": mode, "temp_valid_lifetime": VALID, "temp_preferred_lifetime": PREFERRED_LT,
           "rng": random.Random(8981)}
    net = Net(a_addr=["198.18.0.1/24", "fd00::1/64"], b_addr=["198.18.0.2/24", "2001:db8:1::2/64"],
              a_kw={"ipv6": {"ndp": ndp}})
    assert net.run(lambda: net.a.iface6.link_local and B in net.b.iface6.preferred(), 5)
    return net


def ra(net, valid=1000, preferred=500):
    frame = (Ether(src=ROUTER_MAC, dst="33:33:00:00:00:01") / IPv6(src="fe80::1", dst="ff02::1", hlim=255)
             / ICMPv6ND_RA(routerlifetime=0)
             / ICMPv6NDOptPrefixInfo(prefix="2001:db8:1::", prefixlen=64, L=1, A=1, validlifetime=valid,
                                     preferredlifetime=preferred))
    net.link.a._deliver(net.clock.now, bytes(frame))
    net.a.poll(net.clock.now)


def temporaries(stack) -> list:
    return [e for e in stack.iface6.addresses.values() if e.temporary]


def public(stack):
    return next(e for e in stack.iface6.addresses.values() if e.origin == "slaac")


def run_to(net, t: float) -> None:
    net.run(lambda: False, t - net.clock.now)


def test_temporary_address_life_regeneration_deprecation_and_removal():
    with pair() as net:
        a = net.a
        ra(net)
        t0 = net.clock.now
        assert net.run(lambda: all(e.state == PREFERRED for e in temporaries(a)) and public(a).state == PREFERRED, 5)
        (first,) = temporaries(a)
        assert first.addr[:8] == public(a).addr[:8] and first.addr != public(a).addr
        # Lifetimes: valid TEMP_VALID_LIFETIME; preferred TEMP_PREFERRED_LIFETIME less a DESYNC_FACTOR in [0, 0.4 x].
        assert first.valid_until == pytest.approx(t0 + VALID)
        assert t0 + 0.6 * PREFERRED_LT <= first.preferred_until <= t0 + PREFERRED_LT
        assert a.iface6.source(B) == first.addr  # use_tempaddr=2: RFC 6724 rule 7
        lst = net.b.tcp.listen((ANY6, 80), 4)
        old_conn = a.tcp.connect(None, (B, 80), net.clock.now)
        accepted = []
        net.run(lambda: accepted.append(lst.accept()) or accepted[-1] is not None, 5)
        old_peer = accepted[-1]
        assert old_conn.local_addr == first.addr and old_peer.remote_addr == first.addr
        # REGEN_ADVANCE before deprecation a successor is made; at the deprecation it takes over new connections.
        run_to(net, first.preferred_until - REGEN_ADVANCE + 0.01)
        assert a.stats["ndp.temp_regenerated"] == 1 and len(temporaries(a)) == 2
        second = next(e for e in temporaries(a) if e is not first)
        assert second.state == TENTATIVE and a.iface6.source(B) == first.addr
        run_to(net, first.preferred_until + 0.01)
        assert first.state == DEPRECATED and second.state == PREFERRED and a.stats["ndp.temp_deprecated"] == 1
        assert a.iface6.source(B) == second.addr  # rule 3: not the deprecated one
        assert first.addr in a.iface6.valid() and first.addr not in a.iface6.preferred()
        # The existing connection keeps its deprecated address, exact both ways; a new one uses the successor.
        data = b"still here " * 5000
        assert _pump(net, old_conn, old_peer, data) == data
        assert _pump(net, old_peer, old_conn, data[::-1]) == data[::-1]
        assert old_conn.local_addr == first.addr
        new_conn = a.tcp.connect(None, (B, 80), net.clock.now)
        assert new_conn.local_addr == second.addr
        # A datagram to the deprecated address is still received.
        ep = a.udp.endpoint()
        a.udp.bind(ep, ANY6, 7000)
        out = net.b.udp.endpoint()
        out.sendto(b"to the old one", first.addr, 7000, net.clock.now)
        net.run(lambda: ep.queue, 5)
        assert ep.pop()[0] == b"to the old one"
        # At the end of its valid lifetime it is gone, its solicited-node group with it.
        run_to(net, first.valid_until + 0.01)
        assert first.addr not in a.iface6.addresses and a.stats["ndp.temp_expired"] == 1
        assert solicited_node(first.addr) not in a.iface6.groups
        assert a.stats["stack.internal_error"] == 0


def test_use_tempaddr_1_makes_them_but_prefers_the_public_address():
    with pair(mode=1) as net:
        ra(net)
        assert net.run(lambda: temporaries(net.a) and temporaries(net.a)[0].state == PREFERRED
                       and public(net.a).state == PREFERRED, 5)
        assert net.a.iface6.source(B) == public(net.a).addr


def test_off_by_default_and_bad_modes_refused():
    with Net(a_addr=["198.18.0.1/24", "fd00::1/64"], b_addr=["198.18.0.2/24", "2001:db8:1::2/64"]) as net:
        net.run(lambda: net.a.iface6.link_local, 5)
        ra(net)
        net.run(lambda: False, 3)
        assert public(net.a).state == PREFERRED and temporaries(net.a) == [] and net.a.ndp.temporary is None
    for bad in ({"use_tempaddr": 3}, {"use_tempaddr": 2, "temp_preferred_lifetime": 10, "temp_valid_lifetime": 5}):
        with pytest.raises(ValueError):
            Net(a_addr=["198.18.0.1/24", "fd00::1/64"], a_kw={"ipv6": {"ndp": bad}})


def test_no_temporary_address_when_the_prefix_is_preferred_no_longer_than_regen_advance():
    with pair() as net:
        ra(net, valid=1000, preferred=int(REGEN_ADVANCE))
        net.run(lambda: False, 3)
        assert temporaries(net.a) == [] and net.a.stats["ndp.temp_lifetime_too_short"] == 1


def test_a_later_ra_only_shortens_the_lifetimes():
    with pair() as net:
        ra(net)
        net.run(lambda: False, 2)
        (temp,) = temporaries(net.a)
        valid_until, preferred_until = temp.valid_until, temp.preferred_until
        ra(net, valid=2000, preferred=1500)  # longer: nothing moves past the TEMP_* bounds
        assert (temp.valid_until, temp.preferred_until) == (valid_until, preferred_until)
        ra(net, valid=30, preferred=20)
        now = net.clock.now
        assert temp.valid_until == pytest.approx(now + 30) and temp.preferred_until == pytest.approx(now + 20)
        assert len(temporaries(net.a)) == 1


def test_dad_conflicts_draw_new_identifiers_then_give_up():
    with pair() as net:
        a = net.a
        ra(net)
        seen = set()
        for _ in range(TEMP_IDGEN_RETRIES + 1):
            (temp,) = [e for e in temporaries(a) if e.state == TENTATIVE]
            seen.add(temp.addr)
            na = (Ether(src=ROUTER_MAC, dst="33:33:00:00:00:01") / IPv6(src="fe80::5", dst="ff02::1", hlim=255)
                  / ICMPv6ND_NA(tgt=to_str(temp.addr), R=0, S=0, O=1) / ICMPv6NDOptDstLLAddr(lladdr=ROUTER_MAC))
            net.link.a._deliver(net.clock.now, bytes(na))
            a.poll(net.clock.now)
        assert len(seen) == TEMP_IDGEN_RETRIES + 1 and temporaries(a) == []
        assert a.stats["ndp.dad_failed"] == TEMP_IDGEN_RETRIES + 1 and a.stats["ndp.temp_idgen_failed"] == 1
        net.run(lambda: False, 2)
        assert public(a).state == PREFERRED
