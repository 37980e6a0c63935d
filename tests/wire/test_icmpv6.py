"""ICMPv6 (RFC 4443) and Neighbor Discovery (RFC 4861): golden messages from scapy, emit dissected by scapy."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6ND_RA,
    ICMPv6ND_RS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptMTU,
    ICMPv6NDOptPrefixInfo,
    ICMPv6NDOptSrcLLAddr,
    ICMPv6PacketTooBig,
    ICMPv6ParamProblem,
    ICMPv6TimeExceeded,
    IPv6,
)
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPerror6

from ustack.wire import WireError
from ustack.wire.icmpv6 import (
    DEST_UNREACHABLE,
    ECHO_REQUEST,
    MAX_ERROR_LEN,
    NA_OVERRIDE,
    NA_SOLICITED,
    OPT_MTU,
    OPT_PREFIX_INFO,
    OPT_SOURCE_LLA,
    OPT_TARGET_LLA,
    PACKET_TOO_BIG,
    PARAMETER_PROBLEM,
    PORT_UNREACHABLE,
    TIME_EXCEEDED,
    Icmpv6Message,
    NeighborAdvert,
    NeighborSolicit,
    PrefixInfo,
    RouterAdvert,
    RouterSolicit,
)

A, B = "fd00::1", "fe80::2"
PA = bytes.fromhex("fd000000000000000000000000000001")
PB = bytes.fromhex("fe800000000000000000000000000002")
MAC = bytes.fromhex("02aabbccddee")


def _icmp(layer) -> bytes:
    return raw(IPv6(src=A, dst=B) / layer)[40:]


def _dissect(msg: Icmpv6Message):
    """Our emitted message inside an IPv6 header, dissected by scapy (checksum verified by recomputing)."""
    data = bytes(msg.to_bytes(PA, PB))
    pkt = IPv6(raw(IPv6(src=A, dst=B, nh=58, plen=len(data))) + data)
    layer = pkt.payload
    csum = layer.cksum
    del layer.cksum
    assert IPv6(raw(pkt)).payload.cksum == csum
    return layer


def test_echo_golden_and_reply():
    data = _icmp(ICMPv6EchoRequest(id=0x1234, seq=7, data=b"ping"))
    msg = Icmpv6Message.parse(data, PA, PB)
    assert (msg.type, msg.ident, msg.seq, msg.body) == (ECHO_REQUEST, 0x1234, 7, b"ping")
    ref = _dissect(msg.echo_reply())
    assert isinstance(ref, ICMPv6EchoReply) and (ref.id, ref.seq, ref.data) == (0x1234, 7, b"ping")


def test_bad_checksum_and_truncated():
    data = bytearray(_icmp(ICMPv6EchoRequest()))
    data[-1] ^= 1
    with pytest.raises(WireError) as e:
        Icmpv6Message.parse(data, PA, PB)
    assert e.value.reason == "icmpv6.bad_checksum"
    with pytest.raises(WireError) as e:
        Icmpv6Message.parse(data[:7], PA, PB)
    assert e.value.reason == "icmpv6.truncated"


@pytest.mark.parametrize("itype,code,rest,cls,field", [
    (DEST_UNREACHABLE, PORT_UNREACHABLE, 0, ICMPv6DestUnreach, None),
    (PACKET_TOO_BIG, 0, 1280, ICMPv6PacketTooBig, "mtu"),
    (TIME_EXCEEDED, 1, 0, ICMPv6TimeExceeded, None),
    (PARAMETER_PROBLEM, 2, 42, ICMPv6ParamProblem, "ptr"),
])
def test_errors_dissected_by_scapy(itype, code, rest, cls, field):
    original = raw(IPv6(src=B, dst=A) / UDP(sport=9, dport=53) / (b"q" * 2000))
    msg = Icmpv6Message.error(itype, code, original, rest)
    assert msg.length == MAX_ERROR_LEN  # RFC 4443 2.4 (c): the error fits the 1280-byte minimum MTU
    ref = _dissect(msg)
    assert isinstance(ref, cls) and ref.code == code
    if field:
        assert getattr(ref, field) == rest
    assert ref[IPerror6].dst == A and raw(ref.payload)[40:42] == b"\0\x09" and raw(ref.payload)[42:44] == b"\0\x35"


def test_neighbor_solicit_and_advert():
    data = _icmp(ICMPv6ND_NS(tgt=A) / ICMPv6NDOptSrcLLAddr(lladdr="02:aa:bb:cc:dd:ee"))
    ns = NeighborSolicit.from_message(Icmpv6Message.parse(data, PA, PB))
    assert ns.target == PA and ns.source_lla == MAC
    na = NeighborAdvert(PA, NA_SOLICITED | NA_OVERRIDE, ((OPT_TARGET_LLA, MAC),))
    ref = _dissect(na.to_message())
    assert isinstance(ref, ICMPv6ND_NA) and (ref.R, ref.S, ref.O, ref.tgt) == (0, 1, 1, A)
    assert ref[ICMPv6NDOptDstLLAddr].lladdr == "02:aa:bb:cc:dd:ee"
    assert NeighborAdvert.from_message(Icmpv6Message.parse(raw(ref), PA, PB)) == na
    ref = _dissect(NeighborSolicit(PA, ((OPT_SOURCE_LLA, MAC),)).to_message())
    assert isinstance(ref, ICMPv6ND_NS) and ref.tgt == A and ref[ICMPv6NDOptSrcLLAddr].lladdr == "02:aa:bb:cc:dd:ee"


def test_router_solicit_and_advert():
    ref = _dissect(RouterSolicit(((OPT_SOURCE_LLA, MAC),)).to_message())
    assert isinstance(ref, ICMPv6ND_RS)
    data = _icmp(ICMPv6ND_RA(chlim=64, routerlifetime=600, reachabletime=30000, retranstimer=1000)
                 / ICMPv6NDOptSrcLLAddr(lladdr="02:aa:bb:cc:dd:ee") / ICMPv6NDOptMTU(mtu=1400)
                 / ICMPv6NDOptPrefixInfo(prefix="fd00:1::", prefixlen=64, validlifetime=3600,
                                          preferredlifetime=1800))
    ra = RouterAdvert.from_message(Icmpv6Message.parse(data, PA, PB))
    assert (ra.cur_hop_limit, ra.router_lifetime, ra.reachable_time, ra.retrans_timer) == (64, 600, 30000, 1000)
    assert ra.source_lla == MAC and ra.mtu == 1400
    (pi,) = ra.prefixes
    assert pi.prefix == bytes.fromhex("fd000001" + "00" * 12) and pi.length == 64
    assert pi.on_link and pi.autonomous and (pi.valid_lifetime, pi.preferred_lifetime) == (3600, 1800)
    ref = _dissect(ra.to_message())
    assert isinstance(ref, ICMPv6ND_RA) and ref.routerlifetime == 600
    assert ref[ICMPv6NDOptMTU].mtu == 1400 and ref[ICMPv6NDOptPrefixInfo].prefix == "fd00:1::"


@pytest.mark.parametrize("opts", [b"\x01\x00" + bytes(6), b"\x01\x02" + bytes(6), b"\x03\x01" + bytes(6), b"\x01"])
def test_bad_options(opts):
    msg = Icmpv6Message(135, 0, 0, PA + opts)
    with pytest.raises(WireError) as e:
        NeighborSolicit.from_message(msg)
    assert e.value.reason == "ndp.bad_option"


@given(st.integers(0, 255), st.integers(0, 255), st.integers(0, 0xFFFFFFFF), st.binary(max_size=100))
def test_round_trip(itype, code, rest, body):
    msg = Icmpv6Message(itype, code, rest, body)
    data = msg.to_bytes(PA, PB)
    back = Icmpv6Message.parse(data, PA, PB)
    assert (back.type, back.code, back.rest, back.body) == (itype, code, rest, body)


@given(st.binary(min_size=16, max_size=16), st.integers(0, 128), st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF),
       st.integers(1280, 65535))
def test_ra_round_trip(prefix, plen, valid, pref, mtu):
    ra = RouterAdvert(64, 0, 1800, 0, 0, ((OPT_SOURCE_LLA, MAC), (OPT_MTU, mtu),
                                          (OPT_PREFIX_INFO, PrefixInfo(prefix, plen, 0xC0, valid, pref))))
    assert RouterAdvert.from_message(Icmpv6Message.parse(ra.to_message().to_bytes(PA, PB), PA, PB)) == ra
