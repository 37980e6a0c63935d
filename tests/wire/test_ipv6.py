"""IPv6 (RFC 8200) and extension headers: golden frames from scapy, emit dissected by scapy, the chain walk's rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.layers.inet6 import (
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    HBHOptUnknown,
    RouterAlert,
)
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether

from ustack.wire import WireError
from ustack.wire.ipv6 import (
    HEADER_LEN,
    NH_DEST_OPTS,
    NH_FRAGMENT,
    NH_HOP_BY_HOP,
    NH_ROUTING,
    PP_ERRONEOUS_FIELD,
    PP_UNRECOGNIZED_NEXT_HEADER,
    PP_UNRECOGNIZED_OPTION,
    FragmentHeader,
    Ipv6Header,
    OptionsHeader,
    ParameterProblem,
    RoutingHeader,
    walk,
)

A = "fd00::1"
B = "fd00::2"
PA = bytes.fromhex("fd000000000000000000000000000001")
PB = bytes.fromhex("fd000000000000000000000000000002")


def test_parse_golden_udp():
    pkt = raw(IPv6(src=A, dst=B, hlim=17, tc=0xB8, fl=0xABCDE) / UDP(sport=5, dport=7) / b"hello")
    hdr = Ipv6Header.parse(pkt + b"\0\0\0")  # trailing Ethernet padding is not payload
    assert hdr == Ipv6Header(PA, PB, 17, 13, 17, 0xB8, 0xABCDE)
    assert bytes(hdr.payload(pkt + b"\0\0\0")) == pkt[40:]


def test_emit_dissected_by_scapy():
    hdr = Ipv6Header(PA, PB, 17, 8, 255, 0x12, 0x54321)
    buf = bytearray(48)
    assert hdr.emit(buf) == HEADER_LEN
    ref = IPv6(bytes(buf))
    assert (ref.version, ref.src, ref.dst, ref.nh, ref.plen, ref.hlim, ref.tc, ref.fl) == \
        (6, A, B, 17, 8, 255, 0x12, 0x54321)


@pytest.mark.parametrize("data,reason", [
    (b"\x60" + bytes(38), "ipv6.truncated"),
    (b"\x40" + bytes(39), "ipv6.bad_version"),
    (raw(IPv6(src=A, dst=B, plen=100)), "ipv6.bad_payload_length"),
])
def test_malformed(data, reason):
    with pytest.raises(WireError) as e:
        Ipv6Header.parse(data)
    assert e.value.reason == reason


@given(st.binary(min_size=16, max_size=16), st.binary(min_size=16, max_size=16), st.integers(0, 255),
       st.integers(0, 255), st.integers(0, 255), st.integers(0, 0xFFFFF), st.binary(max_size=64))
def test_round_trip(src, dst, nh, hlim, tc, fl, payload):
    hdr = Ipv6Header(src, dst, nh, len(payload), hlim, tc, fl)
    buf = bytearray(40 + len(payload))
    hdr.emit(buf)
    buf[40:] = payload
    assert Ipv6Header.parse(buf) == hdr


def test_walk_every_extension_header_agrees_with_scapy():
    pkt = raw(IPv6(src=A, dst=B) / IPv6ExtHdrHopByHop(options=[RouterAlert()]) / IPv6ExtHdrDestOpt()
              / IPv6ExtHdrRouting(type=0, segleft=0, addresses=[A]) / IPv6ExtHdrFragment(id=0x1234, offset=0, m=1)
              / UDP(sport=1, dport=2) / b"x")
    chain = walk(pkt, 40, pkt[6])
    assert [type(h) for h in chain.headers] == [OptionsHeader, OptionsHeader, RoutingHeader, FragmentHeader]
    assert chain.headers[0].kind == NH_HOP_BY_HOP and chain.headers[0].options == ((5, b"\0\0"),)
    assert chain.headers[2].routing_type == 0 and chain.headers[2].segments_left == 0
    assert chain.fragment == FragmentHeader(17, 0, True, 0x1234)
    assert chain.next_header == 17 and chain.offset == len(pkt) - 9
    ref = IPv6(pkt)
    assert ref[IPv6ExtHdrFragment].id == 0x1234 and ref[UDP].dport == 2


def test_emitted_extension_headers_dissected_by_scapy():
    buf = bytearray(40 + 8 + 8 + 24 + 8)
    off = Ipv6Header(PA, PB, NH_HOP_BY_HOP, len(buf) - 40).emit(buf)
    off += OptionsHeader(NH_HOP_BY_HOP, NH_DEST_OPTS, ((5, b"\0\0"),)).emit(buf, off)
    off += OptionsHeader(NH_DEST_OPTS, NH_ROUTING, ()).emit(buf, off)
    off += RoutingHeader(NH_FRAGMENT, 0, 0, bytes(4) + PA).emit(buf, off)
    off += FragmentHeader(59, 0x1238, True, 0xDEADBEEF).emit(buf, off)
    ref = IPv6(bytes(buf))
    assert ref[IPv6ExtHdrHopByHop].nh == NH_DEST_OPTS
    assert ref[IPv6ExtHdrRouting].addresses == [A]
    frag = ref[IPv6ExtHdrFragment]
    assert (frag.nh, frag.offset * 8, frag.m, frag.id) == (59, 0x1238, 1, 0xDEADBEEF)
    chain = walk(buf, 40, NH_HOP_BY_HOP)
    assert chain.fragment == FragmentHeader(59, 0x1238, True, 0xDEADBEEF)


def test_routing_type0_with_segments_left_rejected():
    # RFC 5095: RH0 is processed as an unrecognised type: discard, Parameter Problem code 0 at the type field.
    pkt = raw(IPv6(src=A, dst=B) / IPv6ExtHdrRouting(type=0, segleft=1, addresses=[A]) / UDP())
    with pytest.raises(ParameterProblem) as e:
        walk(pkt, 40, pkt[6])
    assert (e.value.reason, e.value.code, e.value.pointer) == ("ipv6.routing_header", PP_ERRONEOUS_FIELD, 42)


def test_hop_by_hop_not_first_rejected():
    pkt = raw(IPv6(src=A, dst=B) / IPv6ExtHdrDestOpt() / IPv6ExtHdrHopByHop() / UDP())
    with pytest.raises(ParameterProblem) as e:
        walk(pkt, 40, pkt[6])
    assert (e.value.reason, e.value.code, e.value.pointer) == ("ipv6.hbh_not_first", PP_UNRECOGNIZED_NEXT_HEADER, 40)


@pytest.mark.parametrize("otype,send,mcast", [(0x7F, False, True), (0x80 | 0x1F, True, True), (0xC0 | 0x1F, True, False)])
def test_unknown_option_actions(otype, send, mcast):
    pkt = raw(IPv6(src=A, dst=B) / IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=otype, optdata=b"ab")]) / UDP())
    with pytest.raises(ParameterProblem) as e:
        walk(pkt, 40, pkt[6])
    assert (e.value.code, e.value.pointer, e.value.send_icmp, e.value.multicast_ok) == \
        (PP_UNRECOGNIZED_OPTION, 42, send, mcast)


def test_unknown_option_skip_bits_ignored():
    pkt = raw(IPv6(src=A, dst=B) / IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=0x1E, optdata=b"ab")]) / UDP())
    chain = walk(pkt, 40, pkt[6])
    assert chain.headers[0].options == ((0x1E, b"ab"),) and chain.next_header == 17


def test_chain_limit():
    pkt = IPv6(src=A, dst=B)
    for _ in range(9):
        pkt = pkt / IPv6ExtHdrDestOpt()
    data = raw(pkt / UDP())
    with pytest.raises(WireError) as e:
        walk(data, 40, data[6])
    assert e.value.reason == "ipv6.too_many_headers"
    assert walk(data, 40, data[6], max_headers=9).next_header == 17


@pytest.mark.parametrize("cut", range(41, 56))
def test_truncated_chain(cut):
    data = raw(IPv6(src=A, dst=B) / IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=0x1E, optdata=b"abcdefgh")]) / UDP())
    with pytest.raises(WireError):
        walk(data[:cut], 40, data[6])


@given(st.binary(max_size=80), st.sampled_from([0, 43, 44, 60]))
def test_walk_never_raises_anything_but_wire_errors(data, nh):
    buf = bytes(40) + data
    try:
        walk(buf, 40, nh)
    except WireError:
        pass


@given(st.integers(0, 0x1FFF), st.booleans(), st.integers(0, 0xFFFFFFFF), st.integers(0, 255))
def test_fragment_round_trip(units, more, ident, nh):
    hdr = FragmentHeader(nh, units * 8, more, ident)
    buf = bytearray(8)
    hdr.emit(buf)
    assert FragmentHeader.parse(buf) == hdr
    ref = IPv6ExtHdrFragment(bytes(buf))
    assert (ref.offset, ref.m, ref.id, ref.nh) == (units, int(more), ident, nh)
