"""MLDv2 listener (RFC 3810) on the wire: the reports the stack sends for the groups it joins, and its answers
to queries, read off the other end of the pipe and dissected by scapy."""

from __future__ import annotations

from scapy.layers.inet6 import (ICMPv6MLDMultAddrRec, ICMPv6MLDone, ICMPv6MLQuery, ICMPv6MLQuery2, ICMPv6MLReport,
                                ICMPv6MLReport2, IPv6, IPv6ExtHdrHopByHop, RouterAlert, in6_getnsma, inet_pton)
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from ustack.net import mld
from ustack.net.addr import Prefix
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
        odd = (eth("33:33:00:00:00:01") / IPv6(src="fe80::1", dst="ff02::1", hlim=1)
               / IPv6ExtHdrHopByHop(nh=58, options=[RouterAlert(value=0)]) / Raw(v1_query_bytes(26)))
        for pkt in (routed, far, odd):
            one.send(pkt)
        one.settle(11)
        assert reports(one.out()) == []
        drops = one.a.stats.drops()
        assert drops["mld.bad_query_source"] == 2 and drops["mld.bad_query_length"] == 1
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


# -- MLDv1 compatibility (RFC 3810 8.2.1) ------------------------------------------------------------
ALL_NODES_MAC = "33:33:00:00:00:01"


def v1_query_bytes(length: int = 24, group: str = "::", mrd: int = 1000) -> bytes:
    """An MLD query of ``length`` octets with its checksum (from fe80::1 to ff02::1), built by scapy."""
    from scapy.layers.inet6 import in6_chksum

    q = bytes(IPv6() / ICMPv6MLQuery(mladdr=group, mrd=mrd))[40:] + bytes(max(0, length - 24))
    pkt = IPv6(src="fe80::1", dst="ff02::1", nh=58)
    raw = bytearray(q[:length])
    raw[2:4] = b"\0\0"
    raw[2:4] = in6_chksum(58, pkt, bytes(raw)).to_bytes(2, "big")
    return bytes(raw)


def v1_query(group: str = "::", mrd: int = 1000, dst: str = "ff02::1", mac: str = ALL_NODES_MAC):
    return (eth(mac) / IPv6(src="fe80::1", dst=dst, hlim=1) / IPv6ExtHdrHopByHop(options=[RouterAlert(value=0)])
            / ICMPv6MLQuery(mladdr=group, mrd=mrd))


def v1_sent(pkts) -> list:
    """(type, group) of each MLDv1 Report/Done, after checking how it was sent (RFC 2710 3, 5)."""
    out = []
    for p in pkts:
        for cls in (ICMPv6MLReport, ICMPv6MLDone):
            if cls in p:
                m = p[cls]
                assert p[IPv6].hlim == 1 and p[IPv6].src.startswith("fe80::")
                hbh = p[IPv6ExtHdrHopByHop]
                assert any(isinstance(o, RouterAlert) and o.value == 0 for o in hbh.options)
                assert p[IPv6].dst == (m.mladdr if cls is ICMPv6MLReport else "ff02::2")
                again = IPv6(bytes(p[IPv6]))
                del again[cls].cksum
                assert IPv6(bytes(again))[cls].cksum == m.cksum
                out.append((m.type, m.mladdr))
    return sorted(out)


def test_a_v1_query_is_answered_with_v1_reports_and_v1_mode_holds_260s():
    one = One()
    try:
        one.settle(3)
        one.out()
        one.send(v1_query(mrd=1000))
        assert one.a.mld.v1_mode and one.a.stats["mld.v1_mode_entered"] == 1
        one.settle(1.0)
        out = one.out()
        assert reports(out) == []  # no MLDv2 while an MLDv1 querier is present
        assert v1_sent(out) == sorted((131, g) for g in groups_of(one.a))
        # A join in MLDv1 mode: MLDv1 Reports (robustness 2: twice), no MLDv2 change records.
        one.a.ndp.add_static(Prefix("fd00::99/64"), one.net.clock.now)
        one.settle(2)
        out = one.out()
        new_group = "ff02::1:ff00:99"
        assert reports(out) == [] and v1_sent(out).count((131, new_group)) == 2
        # A leave in MLDv1 mode: a Done to all-routers.
        iface = one.a.iface6
        iface.addresses.pop(bytes.fromhex("fd00" + "0" * 26 + "99"))
        iface._changed()
        one.settle(2)
        out = one.out()
        assert reports(out) == [] and v1_sent(out) == [(132, new_group)] * 2
        # 260 s (RFC 3810 9.13 defaults) after the last MLDv1 query: MLDv2 again.
        one.settle(250)  # 255 s since the query
        assert one.a.mld.v1_mode
        one.settle(5)
        assert not one.a.mld.v1_mode and one.a.stats["mld.v1_mode_left"] == 1
        one.out()
        one.send(eth(ALL_NODES_MAC) / IPv6(src="fe80::1", dst="ff02::1", hlim=1)
                 / IPv6ExtHdrHopByHop(options=[RouterAlert(value=0)]) / ICMPv6MLQuery2(mrd=1000))
        one.settle(1.0)
        out = one.out()
        assert v1_sent(out) == [] and len(reports(out)) == 1
    finally:
        one.close()


def test_v1_mode_answers_v2_queries_in_v1_and_each_v1_query_rearms_the_timeout():
    one = One()
    try:
        one.settle(3)
        one.send(v1_query())
        one.settle(200)
        one.send(v1_query())  # re-armed: 260 s from here
        one.settle(200)
        assert one.a.mld.v1_mode
        one.out()
        one.send(eth(ALL_NODES_MAC) / IPv6(src="fe80::1", dst="ff02::1", hlim=1)
                 / IPv6ExtHdrHopByHop(options=[RouterAlert(value=0)]) / ICMPv6MLQuery2(mrd=1000))
        one.settle(1.0)
        out = one.out()
        assert reports(out) == [] and v1_sent(out) == sorted((131, g) for g in groups_of(one.a))
    finally:
        one.close()


def test_another_listeners_v1_report_suppresses_ours_and_a_group_query_asks_one_group():
    import ipaddress

    one = One()
    try:
        one.settle(3)
        one.out()
        groups = sorted(groups_of(one.a))
        heard, other = groups[0], groups[1:]
        one.send(v1_query(mrd=10000))  # answers due within 10 s
        gmac = "33:33:" + ":".join(f"{b:02x}" for b in ipaddress.IPv6Address(heard).packed[12:])
        one.send(eth(gmac) / IPv6(src="fe80::7", dst=heard, hlim=1)
                 / IPv6ExtHdrHopByHop(options=[RouterAlert(value=0)]) / ICMPv6MLReport(mladdr=heard))
        one.settle(10)
        assert v1_sent(one.out()) == sorted((131, g) for g in other)
        assert one.a.stats["mld.v1_reports_suppressed"] == 1
        # A group-specific MLDv1 query: that group only.
        one.send(v1_query(group=heard, mrd=500, dst=heard, mac=gmac))
        one.settle(0.5)
        assert v1_sent(one.out()) == [(131, heard)]
    finally:
        one.close()
