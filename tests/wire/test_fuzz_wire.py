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

from tests.wire.frames import IP_A, IP_B, fix_ipv4_checksum, golden_frames
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
    assert eth.header_len <= len(frame)
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
    # What callers slice with must lie inside the buffer.
    assert 20 <= ip.header_len <= ip.total_length <= len(body)
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
            inner = attempt("ipv4", lambda b: Ipv4Header.parse(b, verify_checksum=verify, partial=True), msg.quoted)
            assert inner is None or inner.header_len <= len(msg.quoted)
    elif ip.proto == PROTO_UDP:
        udp = attempt("udp", lambda b: UdpHeader.parse(b, ip.src, ip.dst, verify_checksum=verify), payload)
        assert udp is None or 8 <= udp.length <= len(payload)
        if udp is not None and verify and udp.checksum != 0:
            check_reemit_udp(payload, udp, ip.src, ip.dst)


@st.composite
def mutated_frames(draw):
    frame = bytearray(draw(st.sampled_from(FRAMES)))
    positions = st.sampled_from(range(len(frame) - 1))
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            frame[draw(positions)] = draw(st.integers(0, 255))
        else:
            # A 16-bit field (a length, a port, an EtherType) set to an edge value.
            at = draw(st.sampled_from(range(12, min(len(frame) - 1, 70))))  # the header region
            value = draw(st.sampled_from([0, 1, 4, 7, 8, 19, 20, 0x45, 0x0800, 0x8100, 0xFFFF]) | st.integers(0, 0xFFFF))
            frame[at : at + 2] = value.to_bytes(2, "big")
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
@given(
    ports=st.binary(min_size=4, max_size=4), length=st.integers(0, 0xFFFF),
    checksum=st.sampled_from([0, 0xFFFF]) | st.integers(0, 0xFFFF),
    payload=st.binary(max_size=40), verify=st.booleans(),
)
def test_udp_length_field_against_the_buffer(ports, length, checksum, payload, verify):
    data = ports + length.to_bytes(2, "big") + checksum.to_bytes(2, "big") + payload
    udp = attempt("udp", lambda b: UdpHeader.parse(b, PA, PB, verify_checksum=verify), data)
    assert udp is None or 8 <= udp.length <= len(data)
    if udp is not None:
        assert len(udp.payload(data)) == udp.payload_len


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


def _tlv(kind: int, data: bytes, delta: int) -> bytes:
    return bytes((kind, max(0, min(255, 2 + len(data) + delta)))) + data


def _route(kind, pointer, slots, delta):
    return _tlv(kind, bytes((pointer,)) + bytes(4 * slots), delta)


def _timestamp(pointer, oflw_flg, slots, size, delta):
    return _tlv(68, bytes((pointer, oflw_flg)) + bytes(size * slots), delta)


# Option lists near the edges: right and wrong lengths, pointers and flags,
# a type octet with no length octet after it, EOL in the middle.
OPTION_PIECE = st.one_of(
    st.sampled_from([b"\x00", b"\x01", b"\x07", b"\x44", b"\x94"]),
    st.builds(_tlv, st.sampled_from([7, 68, 130, 131, 137, 148, 25]), st.binary(max_size=10), st.integers(-3, 2)),
    st.builds(_route, st.sampled_from([7, 131, 137]), st.integers(0, 16), st.integers(0, 4), st.integers(-2, 2)),
    st.builds(_timestamp, st.integers(0, 20), st.integers(0, 0x13), st.integers(0, 3), st.sampled_from([4, 8]), st.integers(-2, 2)),
)
OPTION_LISTS = st.one_of(
    st.lists(OPTION_PIECE, min_size=1, max_size=6).map(lambda parts: b"".join(parts)[:40]),
    st.binary(min_size=1, max_size=40),
)


@BOUNDED
@given(options=OPTION_LISTS, pad=st.booleans(), extra=st.binary(max_size=16), view=VIEWS)
def test_random_options_behind_a_valid_checksum(options, pad, extra, view):
    # Version, IHL, total length and checksum all right: only the option list decides.
    # Without padding the list is cut at the last whole word, so it can end mid-option.
    options = options + bytes(-len(options) % 4) if pad else options[: len(options) & ~3]
    header = bytearray(b"\x45\0\0\0\0\x01\0\0\x40\x11\0\0" + PA + PB + options)
    header[0] = 0x40 | (len(header) // 4)
    header[2:4] = (len(header) + len(extra)).to_bytes(2, "big")
    fix_ipv4_checksum(header)
    data = bytes(header) + extra
    ip = attempt("ipv4", Ipv4Header.parse, view(data))
    if ip is not None:
        assert ip.options == options
        check_reemit_ipv4(data, ip)


@BOUNDED
@given(frame=mutated_frames(), view=VIEWS, verify=st.booleans())
def test_mutated_frames_full_walk(frame, view, verify):
    dissect(view(frame), verify)


ADDRS = st.binary(min_size=4, max_size=4)


@settings(max_examples=150, deadline=None)
@given(
    hdr=st.builds(
        Ipv4Header,
        dscp=st.integers(0, 63), ecn=st.integers(0, 3), total_length=st.integers(20, 0xFFFF),
        ident=st.integers(0, 0xFFFF), flags_df=st.booleans(), flags_mf=st.booleans(),
        frag_offset=st.integers(0, 0x1FFF).map(lambda x: x * 8), ttl=st.integers(0, 255),
        proto=st.integers(0, 255), src=ADDRS, dst=ADDRS,
    ),
)
def test_random_ipv4_headers_agree_with_scapy(hdr):
    buf = bytearray(hdr.header_len)
    hdr.emit(buf)
    pkt = IP(bytes(buf))
    assert (pkt.len, pkt.id, pkt.ttl, pkt.proto, pkt.frag * 8) == (hdr.total_length, hdr.ident, hdr.ttl, hdr.proto, hdr.frag_offset)
    assert (pkt.src, pkt.dst, pkt.tos) == (bytes_to_ip(hdr.src), bytes_to_ip(hdr.dst), hdr.dscp << 2 | hdr.ecn)
    del pkt.chksum
    assert raw(pkt) == bytes(buf)
    assert Ipv4Header.parse(buf, partial=True) == dataclasses.replace(hdr, checksum=int.from_bytes(buf[10:12], "big"))


@settings(max_examples=150, deadline=None)
@given(sport=st.integers(0, 0xFFFF), dport=st.integers(0, 0xFFFF), payload=st.binary(max_size=300), src=ADDRS, dst=ADDRS)
def test_random_udp_datagrams_agree_with_scapy(sport, dport, payload, src, dst):
    udp = UdpHeader(sport, dport, 8 + len(payload))
    buf = bytearray(udp.length)
    udp.emit(buf, 0, src, dst, payload=payload)
    pkt = IP(src=bytes_to_ip(src), dst=bytes_to_ip(dst)) / UDP(sport=sport, dport=dport) / payload
    assert raw(pkt)[20:] == bytes(buf)
    assert UdpHeader.parse(buf, src, dst) == dataclasses.replace(udp, checksum=int.from_bytes(buf[6:8], "big"))


@settings(max_examples=150, deadline=None)
@given(type_=st.sampled_from([0, 8]), ident=st.integers(0, 0xFFFF), seq=st.integers(0, 0xFFFF), payload=st.binary(max_size=300))
def test_random_echo_messages_agree_with_scapy(type_, ident, seq, payload):
    msg = IcmpMessage(type_, 0, ident, seq, payload)
    buf = bytearray(msg.length)
    msg.emit(buf)
    assert raw(ICMP(type=type_, id=ident, seq=seq) / payload) == bytes(buf)
    assert IcmpMessage.parse(buf) == dataclasses.replace(msg, checksum=int.from_bytes(buf[2:4], "big"))
