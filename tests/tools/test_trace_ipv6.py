"""``ustack trace`` on IPv6: NDP, ICMPv6, TCP and UDP over IPv6, fragments, extension headers, filters.

Frames are built with scapy, written to a pcap and traced; each line is
compared exactly with what the format promises (trace_format's docstring).
"""

from __future__ import annotations

from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import (ICMPv6DestUnreach, ICMPv6EchoReply, ICMPv6EchoRequest, ICMPv6ND_NA, ICMPv6ND_NS,
                                ICMPv6ND_RA, ICMPv6ND_RS, ICMPv6NDOptDstLLAddr, ICMPv6NDOptMTU,
                                ICMPv6NDOptPrefixInfo, ICMPv6NDOptSrcLLAddr, ICMPv6PacketTooBig, ICMPv6ParamProblem,
                                ICMPv6TimeExceeded, IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment,
                                IPv6ExtHdrHopByHop)
from scapy.layers.l2 import Ether

from .test_trace import MAC_A, MAC_B, body, run, write

A6, B6, LL_A, SN_B = "fd00::1", "fd00::2", "fe80::1", "ff02::1:ff00:2"


def e(src_is_a: bool = True):
    return Ether(src=MAC_A, dst=MAC_B) if src_is_a else Ether(src=MAC_B, dst=MAC_A)


def lines_of(tmp_path, capsys, pkts, *args):
    rc, lines, err = run(capsys, write(tmp_path / "v6.pcap", pkts), *args)
    assert rc == 0, err
    return [body(x) for x in lines]


def test_ndp_and_icmpv6_lines(tmp_path, capsys):
    quoted = IPv6(src=B6, dst=A6) / UDP(sport=5000, dport=7) / b"q"
    pkts = [
        e() / IPv6(src=LL_A, dst=SN_B, hlim=255) / ICMPv6ND_NS(tgt=B6) / ICMPv6NDOptSrcLLAddr(lladdr=MAC_A),
        e(False) / IPv6(src=B6, dst=LL_A, hlim=255) / ICMPv6ND_NA(tgt=B6, R=0, S=1, O=1)
        / ICMPv6NDOptDstLLAddr(lladdr=MAC_B),
        e(False) / IPv6(src="fe80::2", dst="ff02::2", hlim=255) / ICMPv6ND_RS() / ICMPv6NDOptSrcLLAddr(lladdr=MAC_B),
        e() / IPv6(src=LL_A, dst="ff02::1", hlim=255) / ICMPv6ND_RA(chlim=64, routerlifetime=1800, M=0, O=1)
        / ICMPv6NDOptPrefixInfo(prefix="fd00::", prefixlen=64, validlifetime=86400, preferredlifetime=14400)
        / ICMPv6NDOptMTU(mtu=1500),
        e(False) / IPv6(src=B6, dst=A6) / ICMPv6EchoRequest(id=7, seq=3, data=b"x" * 56),
        e() / IPv6(src=A6, dst=B6) / ICMPv6EchoReply(id=7, seq=3, data=b"x" * 56),
        e() / IPv6(src=A6, dst=B6) / ICMPv6DestUnreach(code=4) / quoted,
        e() / IPv6(src=A6, dst=B6) / ICMPv6PacketTooBig(mtu=1280) / quoted,
        e() / IPv6(src=A6, dst=B6) / ICMPv6TimeExceeded(code=1) / quoted,
        e() / IPv6(src=A6, dst=B6) / ICMPv6ParamProblem(code=1, ptr=40) / quoted,
    ]
    assert lines_of(tmp_path, capsys, pkts) == [
        f"ICMP6 {LL_A} > {SN_B} neighbor solicitation who-has {B6} (src lladdr {MAC_A})",
        f"ICMP6 {B6} > {LL_A} neighbor advertisement {B6} is-at {MAC_B} [S O]",
        f"ICMP6 fe80::2 > ff02::2 router solicitation (src lladdr {MAC_B})",
        f"ICMP6 {LL_A} > ff02::1 router advertisement hop limit 64 lifetime 1800 [O] "
        "(prefix fd00::/64 [LA] valid 86400 preferred 14400, mtu 1500)",
        f"ICMP6 {B6} > {A6} echo request id 7 seq 3 len 56",
        f"ICMP6 {A6} > {B6} echo reply id 7 seq 3 len 56",
        f"ICMP6 {A6} > {B6} type 1 code 4 port unreachable for UDP [{B6}]:5000 > [{A6}]:7",
        f"ICMP6 {A6} > {B6} type 2 code 0 packet too big (mtu 1280) for UDP [{B6}]:5000 > [{A6}]:7",
        f"ICMP6 {A6} > {B6} type 3 code 1 fragment reassembly time exceeded for UDP [{B6}]:5000 > [{A6}]:7",
        f"ICMP6 {A6} > {B6} type 4 code 1 unrecognized next header (pointer 40) for UDP [{B6}]:5000 > [{A6}]:7",
    ]


def test_tcp_over_ipv6_is_analysed_like_ipv4(tmp_path, capsys):
    c, s = (B6, 40000), (A6, 80)
    pkts = [
        e(False) / IPv6(src=B6, dst=A6) / TCP(sport=40000, dport=80, flags="S", seq=1000, window=64800,
                                              options=[("MSS", 1440)]),
        e() / IPv6(src=A6, dst=B6) / TCP(sport=80, dport=40000, flags="SA", seq=5000, ack=1001, window=65535),
        e(False) / IPv6(src=B6, dst=A6) / TCP(sport=40000, dport=80, flags="PA", seq=1001, ack=5001) / (b"d" * 100),
        e(False) / IPv6(src=B6, dst=A6) / TCP(sport=40000, dport=80, flags="PA", seq=1001, ack=5001) / (b"d" * 100),
    ]
    assert lines_of(tmp_path, capsys, pkts) == [
        f"TCP [{c[0]}]:{c[1]} > [{s[0]}]:{s[1]} [S] seq 0 win 64800 len 0 options [mss 1440]",
        f"TCP [{s[0]}]:{s[1]} > [{c[0]}]:{c[1]} [S.] seq 0 ack 1 win 65535 len 0",
        f"TCP [{c[0]}]:{c[1]} > [{s[0]}]:{s[1]} [P.] seq 1:101 ack 1 win 8192 len 100",
        f"TCP [{c[0]}]:{c[1]} > [{s[0]}]:{s[1]} [P.] seq 1:101 ack 1 win 8192 len 100 [retransmission]",
    ]


def test_fragments_and_extension_headers(tmp_path, capsys):
    payload = UDP(sport=5000, dport=7, len=8 + 2000) / (b"u" * 2000)
    raw = bytes(payload)
    pkts = [
        e(False) / IPv6(src=B6, dst=A6) / IPv6ExtHdrFragment(nh=17, offset=0, m=1, id=9) / raw[:1232],
        e(False) / IPv6(src=B6, dst=A6) / IPv6ExtHdrFragment(nh=17, offset=1232 // 8, m=0, id=9) / raw[1232:],
        e(False) / IPv6(src=B6, dst=A6) / IPv6ExtHdrFragment(nh=17, offset=0, m=0, id=10) / UDP(sport=1, dport=7)
        / b"atomic",
        e(False) / IPv6(src=B6, dst=A6) / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / UDP(sport=1, dport=7) / b"opt",
        e(False) / IPv6(src=B6, dst=A6, nh=60) / (bytes(IPv6ExtHdrDestOpt(nh=60)) * 9),
        e(False) / IPv6(src=B6, dst=A6, nh=0, plen=4) / b"\x11\x00\x00\x00",
    ]
    assert lines_of(tmp_path, capsys, pkts) == [
        f"IP6 [{B6}]:5000 > [{A6}]:7 frag id 9 offset 0 MF proto udp len 1232",
        f"IP6 {B6} > {A6} frag id 9 offset 1232 proto udp len 776",
        f"UDP [{B6}]:1 > [{A6}]:7 len 6",  # an atomic fragment (RFC 6946) is the whole datagram
        f"UDP [{B6}]:1 > [{A6}]:7 len 3 ext [hbh,dst]",
        f"IP6 {B6} > {A6} ext chain too long (8+ headers) len 72",
        f"IP6 {B6} > {A6} ext [hbh] truncated len 4",
    ]


def test_host_and_port_filters_apply_to_ipv6(tmp_path, capsys):
    pkts = [
        e(False) / IPv6(src=B6, dst=A6) / UDP(sport=5000, dport=7) / b"a",
        e(False) / IPv6(src="fd00::9", dst=A6) / UDP(sport=5000, dport=9) / b"b",
        e() / IPv6(src=LL_A, dst=SN_B, hlim=255) / ICMPv6ND_NS(tgt=B6),
    ]
    assert lines_of(tmp_path, capsys, pkts, "--host", "fd00:0::9") == [f"UDP [fd00::9]:5000 > [{A6}]:9 len 1"]
    assert lines_of(tmp_path, capsys, pkts, "--port", "7") == [f"UDP [{B6}]:5000 > [{A6}]:7 len 1"]


def test_mangled_ipv6_never_raises(tmp_path, capsys):
    base = bytes(e(False) / IPv6(src=B6, dst=A6) / TCP(sport=1, dport=2, options=[("MSS", 1440)]) / (b"x" * 20))
    pkts = [Ether(base[:n]) for n in range(14, len(base))]
    pkts += [Ether(base[:20] + bytes([b]) + base[21:]) for b in (0, 43, 44, 58, 60, 255)]  # every next header
    lines = lines_of(tmp_path, capsys, pkts)
    assert len(lines) == len(pkts) and not any("undecodable" in x for x in lines)
