"""MLDv2 listener (RFC 3810) on the wire: the reports the stack sends for the groups it joins, and its answers
to queries, read off the other end of the pipe and dissected by scapy."""

from __future__ import annotations

from scapy.layers.inet6 import (ICMPv6MLDMultAddrRec, ICMPv6MLQuery, ICMPv6MLQuery2, ICMPv6MLReport2, IPv6, IPv6ExtHdrHopByHop,
                                RouterAlert, in6_getnsma, inet_pton)
from scapy.layers.l2 import Ether

from ustack.net import mld
from ustack.net.route6 import solicited_node

from .test_ndp import A6, One, eth


def reports(pkts) -> list:
    """(record types, groups) of each MLDv2 report, after checking how it was sent."""
    out = []
    for p in pkts:
        if ICMPv6MLReport2 not in p:
            continue
        assert p[Ether].dst == "33:33:00:00:00:16" and p[IPv6].dst == "ff02::16" and p[IPv6].hlim == 1
        hbh = p[IPv6ExtHdrHopByHop]
        assert any(isinstance(o, RouterAlert) and o.value == 0 for o in hbh.options), hbh.options
        rep = p[ICMPv6MLReport2]
        raw = bytes(rep)
        assert rep.cksum == ICMPv6MLReport2(raw).cksum  # scapy recomputes nothing: the field as sent
        again = IPv6(bytes(p[IPv6]))
        del again[ICMPv6MLReport2].cksum
        assert IPv6(bytes(again))[ICMPv6MLReport2].cksum == rep.cksum  # and it is the right one
        recs = []
        for r in rep.records:  # scapy hangs each further record off the previous one as its payload
            while isinstance(r, ICMPv6MLDMultAddrRec):
                recs.append((r.rtype, r.dst))
                r = r.payload
        assert len(recs) == rep.records_number
        out.append(sorted(recs))
    return out


def groups_of(stack) -> set:
    import ipaddress

    return {str(ipaddress.IPv6Address(g)) for g in stack.iface6.groups if g != bytes.fromhex("ff02" + "0" * 26 + "01")}


def test_the_groups_of_every_address_are_announced_twice_with_change_to_exclude():
    one = One.__new__(One)
    from .netsim import Net

    one.net = Net(a_addr=["198.18.0.1/24", A6 + "/64"])
    one.a = one.net.a
    try:
        seen = []
        for _ in range(6):  # 3 s of the stack's life, a round every 0.5 s: DAD, then reports
            one.a.poll(one.net.clock.now)
            seen += one.out()
            one.net.clock.set(one.net.clock.now + 0.5)
        rs = reports(seen)
        groups = groups_of(one.a)
        assert {solicited_node(a) for a in one.a.iface6.addresses} and "ff02::1" not in groups
        announced = [dict((g, t) for t, g in r) for r in rs]
        for g in groups:  # each group: a CHANGE_TO_EXCLUDE record in at least two reports (robustness 2)
            assert sum(1 for a in announced if a.get(g) == mld.CHANGE_TO_EXCLUDE) >= 2, (g, rs)
        assert not any("ff02::1" in a for a in announced)
        assert one.a.stats["mld.reports_sent"] == len(rs)
    finally:
        one.net.close()


def test_a_general_query_is_answered_with_every_group_within_its_delay():
    one = One()
    try:
        one.settle(3)
        one.out()
        q = (eth("33:33:00:00:00:01") / IPv6(src="fe80::1", dst="ff02::1", hlim=1)
             / IPv6ExtHdrHopByHop(options=[RouterAlert(value=0)]) / ICMPv6MLQuery2(mrd=1000))
        one.send(q)
        assert one.a.stats["mld.queries_received"] == 1
        one.settle(1.0)  # Maximum Response Delay 1000 ms
        rs = reports(one.out())
        assert len(rs) == 1
        assert {t for t, _ in rs[0]} == {mld.MODE_IS_EXCLUDE} and {g for _, g in rs[0]} == groups_of(one.a)
    finally:
        one.close()


def test_a_group_query_is_answered_for_that_group_only_and_bad_queries_are_dropped():
    one = One()
    try:
        one.settle(3)
        one.out()
        group = sorted(groups_of(one.a))[0]
        import ipaddress

        gmac = "33:33:" + ":".join(f"{b:02x}" for b in ipaddress.IPv6Address(group).packed[12:])
        q = (eth(gmac) / IPv6(src="fe80::1", dst=group, hlim=1)
             / IPv6ExtHdrHopByHop(options=[RouterAlert(value=0)]) / ICMPv6MLQuery2(mladdr=group, mrd=500))
        one.send(q)
        one.settle(0.5)
        assert reports(one.out()) == [[(mld.MODE_IS_EXCLUDE, group)]]
        routed = (eth("33:33:00:00:00:01") / IPv6(src="fd00::7", dst="ff02::1", hlim=1)
                  / IPv6ExtHdrHopByHop(options=[RouterAlert(value=0)]) / ICMPv6MLQuery2())
        far = (eth("33:33:00:00:00:01") / IPv6(src="fe80::1", dst="ff02::1", hlim=64)
               / IPv6ExtHdrHopByHop(options=[RouterAlert(value=0)]) / ICMPv6MLQuery2())
        v1 = (eth("33:33:00:00:00:01") / IPv6(src="fe80::1", dst="ff02::1", hlim=1)
              / IPv6ExtHdrHopByHop(options=[RouterAlert(value=0)]) / ICMPv6MLQuery())
        for pkt in (routed, far, v1):
            one.send(pkt)
        one.settle(11)
        assert reports(one.out()) == []
        drops = one.a.stats.drops()
        assert drops["mld.bad_query_source"] == 2 and drops["mld.v1_query_ignored"] == 1
    finally:
        one.close()


def test_a_group_left_is_reported_with_change_to_include():
    one = One()
    try:
        one.settle(3)
        one.out()
        iface = one.a.iface6
        addr = next(a for a in iface.addresses if a[0] != 0xFE)
        gone = solicited_node(addr)
        iface.addresses.pop(addr)
        iface._changed()  # as an address's removal would
        one.settle(2)
        rs = reports(one.out())
        import ipaddress

        g = str(ipaddress.IPv6Address(gone))
        assert len(rs) == 2 and all(r == [(mld.CHANGE_TO_INCLUDE, g)] for r in rs), rs
    finally:
        one.close()


def test_max_response_delay_codes():
    assert mld.max_response_delay(1000) == 1.0
    assert mld.max_response_delay(0x8000) == (0x1000 << 3) / 1000.0  # exponential form (RFC 3810 5.1.3)
    assert mld.max_response_delay(0xFFFF) == ((0x0FFF | 0x1000) << 10) / 1000.0
    assert in6_getnsma(inet_pton(10, A6))  # scapy agrees on what a solicited-node group is
