"""Property tests: random and mutated frames through every parser, random headers through emit.

Only ``WireError`` may escape a parser, and its reason carries the parser's
prefix. Whatever parses re-emits to the same bytes (checksum fields aside,
since emit recomputes them) and re-parses.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.layers.inet import ICMP, IP, UDP

from tests.wire.frames import IP_A, IP_B, golden_frames
from ustack.wire import WireError
from ustack.wire.arp import ArpPacket
from ustack.wire.ethernet import ETHERTYPE_ARP, ETHERTYPE_IPV4, EthernetHeader
from ustack.wire.icmp import IcmpMessage
from ustack.wire.ipv4 import PROTO_ICMP, PROTO_UDP, Ipv4Header, bytes_to_ip, ip_to_bytes
from ustack.wire.udp import UdpHeader

PA, PB = ip_to_bytes(IP_A), ip_to_bytes(IP_B)
FRAMES = list(golden_frames().values())
BOUNDED = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VIEWS = st.sampled_from([bytes, bytearray, memoryview])


def attempt(prefix: str, parse, data):
    """Run a parser; a WireError must carry ``prefix.``; anything else propagates and fails."""
    try:
        return parse(data)
    except WireError as e:
        assert isinstance(e.reason, str) and e.reason.startswith(prefix + "."), e.reason
        return None


def masked(data, *ranges) -> bytes:
    b = bytearray(data)
    for lo, hi in ranges:
        b[lo:hi] = bytes(hi - lo)
    return bytes(b)


def check_reemit_eth(data, eth: EthernetHeader) -> None:
    buf = bytearray(eth.header_len)
    eth.emit(buf)
    assert buf == bytes(data[: eth.header_len])


def check_reemit_arp(data, arp: ArpPacket) -> None:
    buf = bytearray(28)
    arp.emit(buf)
    assert buf == bytes(data[:28])


def check_reemit_ipv4(data, ip: Ipv4Header) -> None:
    n = ip.header_len
    buf = bytearray(n)
    ip.emit(buf)
    original = bytearray(data[:n])
    original[6] &= 0x7F  # the reserved flag bit is not kept (RFC 791: must be zero)
    assert masked(buf, (10, 12)) == masked(original, (10, 12))
    assert Ipv4Header.parse(buf, partial=True) == dataclasses.replace(ip, checksum=int.from_bytes(buf[10:12], "big"))
    ip.parsed_options  # validated at parse time: must not raise


def check_reemit_icmp(data, msg: IcmpMessage) -> None:
    buf = bytearray(msg.length)
    msg.emit(buf)
    assert masked(buf, (2, 4)) == masked(data, (2, 4))
    IcmpMessage.parse(buf)


def check_reemit_udp(dgram, udp: UdpHeader, src, dst) -> None:
    buf = bytearray(dgram[: udp.length])
    udp.emit(buf, 0, src, dst)
    assert masked(buf, (6, 8)) == masked(dgram[: udp.length], (6, 8))
    assert UdpHeader.parse(buf, src, dst).checksum == int.from_bytes(buf[6:8], "big") != 0


def dissect(frame, verify: bool) -> None:
    """Walk a frame the way the slow path does, checking every layer's contract."""
    eth = attempt("eth", EthernetHeader.parse, frame)
    if eth is None:
        return
    check_reemit_eth(frame, eth)
    body = memoryview(frame)[eth.header_len :]
    if eth.ethertype == ETHERTYPE_ARP:
        arp = attempt("arp", ArpPacket.parse, body)
        if arp is not None:
            check_reemit_arp(body, arp)
        return
    if eth.ethertype != ETHERTYPE_IPV4:
        return
    ip = attempt("ipv4", lambda b: Ipv4Header.parse(b, verify_checksum=verify), body)
    if ip is None:
        return
    if verify:
        check_reemit_ipv4(body, ip)
    payload = ip.payload(body)
    if ip.is_fragment:
        return
    if ip.proto == PROTO_ICMP:
        msg = attempt("icmp", lambda b: IcmpMessage.parse(b, verify_checksum=verify), payload)
        if msg is not None and verify:
            check_reemit_icmp(payload, msg)
        if msg is not None and msg.is_error:
            attempt("ipv4", lambda b: Ipv4Header.parse(b, verify_checksum=verify, partial=True), msg.quoted)
    elif ip.proto == PROTO_UDP:
        udp = attempt("udp", lambda b: UdpHeader.parse(b, ip.src, ip.dst, verify_checksum=verify), payload)
        if udp is not None and verify and udp.checksum != 0:
            check_reemit_udp(payload, udp, ip.src, ip.dst)


@st.composite
def mutated_frames(draw):
    frame = bytearray(draw(st.sampled_from(FRAMES)))
    for _ in range(draw(st.integers(0, 4))):
        frame[draw(st.integers(0, len(frame) - 1))] = draw(st.integers(0, 255))
    action = draw(st.sampled_from(["none", "truncate", "extend"]))
    if action == "truncate":
        del frame[draw(st.integers(0, len(frame))) :]
    elif action == "extend":
        frame += draw(st.binary(min_size=1, max_size=64))
    return bytes(frame)


def test_golden_frames_walk_cleanly():
    for frame in FRAMES:
        dissect(frame, verify=True)


@BOUNDED
@given(data=st.binary(max_size=160), view=VIEWS, verify=st.booleans())
def test_random_bytes_every_parser(data, view, verify):
    buf = view(data)
    attempt("eth", EthernetHeader.parse, buf)
    attempt("arp", ArpPacket.parse, buf)
    attempt("ipv4", lambda b: Ipv4Header.parse(b, verify_checksum=verify), buf)
    attempt("ipv4", lambda b: Ipv4Header.parse(b, verify_checksum=verify, partial=True), buf)
    attempt("icmp", lambda b: IcmpMessage.parse(b, verify_checksum=verify), buf)
    attempt("udp", lambda b: UdpHeader.parse(b, PA, PB, verify_checksum=verify), buf)


@BOUNDED
@given(data=st.binary(min_size=20, max_size=80), verify=st.booleans())
def test_random_ipv4_headers_reach_the_deep_checks(data):
    pass
