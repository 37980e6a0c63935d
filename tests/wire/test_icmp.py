"""ICMPv4 (RFC 792): golden echo and error messages from scapy, emit checked by scapy, malformed."""

from __future__ import annotations

import pytest
from scapy.compat import raw
from scapy.layers.inet import ICMP, IP, UDP, IPerror, UDPerror
from scapy.layers.l2 import Ether

from tests.wire.frames import IP_A, IP_B, IP_C, golden_frames
from ustack.wire import WireError
from ustack.wire.checksum import internet_checksum
from ustack.wire.icmp import (
    DEST_UNREACHABLE,
    ECHO_REPLY,
    ECHO_REQUEST,
    FRAGMENTATION_NEEDED,
    MAX_QUOTE_LEN,
    PARAMETER_PROBLEM,
    PORT_UNREACHABLE,
    REDIRECT,
    TIME_EXCEEDED,
    TTL_EXCEEDED,
    IcmpMessage,
)
from ustack.wire.ipv4 import PROTO_ICMP, Ipv4Header, ip_to_bytes
from ustack.wire.udp import UdpHeader

PA, PB, PC = ip_to_bytes(IP_A), ip_to_bytes(IP_B), ip_to_bytes(IP_C)


def scapy_checksum(message: bytes) -> int:
    pkt = ICMP(message)
    del pkt.chksum
    return ICMP(raw(pkt)).chksum


def _icmp_of(frame: bytes):
    ip = Ipv4Header.parse(frame[14:])
    assert ip.proto == PROTO_ICMP
    return ip, IcmpMessage.parse(ip.payload(frame[14:]))


def test_parse_golden_echo_request():
    frame = golden_frames()["icmp_echo"]
    ip, msg = _icmp_of(frame)
    ref = Ether(frame)[ICMP]
    assert msg == IcmpMessage(ECHO_REQUEST, 0, 0x1234, 3, b"ping data 0123456789", ref.chksum)
    assert msg.header_len == 8 and msg.length == 28
    assert not msg.is_error


@pytest.mark.parametrize("view", [bytes, bytearray, memoryview])
def test_parse_golden_echo_reply_odd_length(view):
    data = raw(ICMP(type=0, id=7, seq=0xFFFF) / b"odd")
    msg = IcmpMessage.parse(view(data))
    assert (msg.type, msg.code, msg.ident, msg.seq, msg.payload) == (ECHO_REPLY, 0, 7, 0xFFFF, b"odd")
    assert type(msg.payload) is bytes


def test_parse_golden_port_unreachable_quoting_a_datagram():
    frame = golden_frames()["icmp_unreach"]
    ip, msg = _icmp_of(frame)
    assert ip.src == PC
    assert (msg.type, msg.code) == (DEST_UNREACHABLE, PORT_UNREACHABLE)
    assert msg.is_error
    assert len(msg.quoted) == 28  # IP header + the first 8 bytes (RFC 792)
    # The quoted datagram is a prefix: parse it as such and find the ports.
    inner = Ipv4Header.parse(msg.quoted, partial=True)
    assert (inner.src, inner.dst, inner.ttl, inner.total_length) == (PB, PA, 1, 48)
    ref = Ether(frame)[ICMP]
    quote = ref[IPerror]
    assert (quote.src, quote.dst) == (IP_B, IP_A)
    assert (ref[UDPerror].sport, ref[UDPerror].dport) == (33434, 33435)
    # Only 8 bytes of the UDP datagram are quoted: enough for the ports.
    q = msg.quoted[inner.header_len :]
    assert (int.from_bytes(q[0:2], "big"), int.from_bytes(q[2:4], "big")) == (33434, 33435)


def test_parse_golden_time_exceeded_full_quote():
    frame = golden_frames()["icmp_ttl"]
    ip, msg = _icmp_of(frame)
    assert (msg.type, msg.code) == (TIME_EXCEEDED, TTL_EXCEEDED)
    inner = Ipv4Header.parse(msg.quoted)  # the whole datagram is quoted: fully valid
    assert inner.total_length == len(msg.quoted) == 48
    udp = UdpHeader.parse(inner.payload(msg.quoted), inner.src, inner.dst)
    assert (udp.src_port, udp.dst_port, udp.length) == (33434, 33435, 28)


def test_rest_of_header_accessors():
    msg = IcmpMessage.parse(raw(ICMP(type=3, code=4, nexthopmtu=1400) / raw(IP())))
    assert (msg.type, msg.code, msg.next_hop_mtu) == (DEST_UNREACHABLE, FRAGMENTATION_NEEDED, 1400)
    msg = IcmpMessage.parse(raw(ICMP(type=12, ptr=9) / raw(IP())))
    assert (msg.type, msg.pointer) == (PARAMETER_PROBLEM, 9)
    msg = IcmpMessage.parse(raw(ICMP(type=5, code=1, gw="198.18.0.254") / raw(IP())))
    assert (msg.type, msg.gateway) == (REDIRECT, ip_to_bytes("198.18.0.254"))


def test_unknown_type_parses_raw():
    data = bytearray(b"\xc8\x09\0\0\0\x01\0\x02zz")
    data[2:4] = internet_checksum(data).to_bytes(2, "big")
    msg = IcmpMessage.parse(data)
    assert (msg.type, msg.code, msg.ident, msg.seq, msg.payload) == (200, 9, 1, 2, b"zz")


def _check_against_scapy(msg: IcmpMessage, buf: bytes) -> ICMP:
    pkt = ICMP(buf)
    assert (pkt.type, pkt.code) == (msg.type, msg.code)
    assert pkt.chksum == scapy_checksum(buf)
    return pkt


@pytest.mark.parametrize("payload", [b"", b"x", b"abcdefgh" * 7, bytes(range(256)) * 5 + b"!"])
def test_emit_echo_dissected_by_scapy(payload):
    msg = IcmpMessage.echo_request(0xBEEF, 0x0102, payload)
    buf = bytearray(b"\x55" * (msg.length + 6))
    n = msg.emit(memoryview(buf), 3)
    assert n == msg.length == 8 + len(payload)
    assert buf[:3] == b"\x55" * 3 and buf[3 + n :] == b"\x55" * 3
    data = bytes(buf[3 : 3 + n])
    pkt = _check_against_scapy(msg, data)
    assert (pkt.id, pkt.seq, bytes(pkt.payload)) == (0xBEEF, 0x0102, payload)
    assert data == raw(ICMP(type=8, id=0xBEEF, seq=0x0102) / payload)
    reply = IcmpMessage.parse(data).echo_reply()
    assert (reply.type, reply.ident, reply.seq, reply.payload) == (ECHO_REPLY, 0xBEEF, 0x0102, payload)
    out = bytearray(reply.length)
    reply.emit(out)
    assert bytes(out) == raw(ICMP(type=0, id=0xBEEF, seq=0x0102) / payload)


def test_emit_dest_unreachable_dissected_by_scapy():
    original = raw(IP(src=IP_B, dst=IP_A) / UDP(sport=5000, dport=9) / (b"d" * 30))
    msg = IcmpMessage.dest_unreachable(PORT_UNREACHABLE, original)
    buf = bytearray(msg.length)
    msg.emit(buf)
    pkt = _check_against_scapy(msg, bytes(buf))
    assert (pkt[IPerror].src, pkt[IPerror].dst) == (IP_B, IP_A)
    assert (pkt[UDPerror].sport, pkt[UDPerror].dport) == (5000, 9)
    assert bytes(buf[8:]) == original


def test_emit_frag_needed_and_time_exceeded():
    original = raw(IP(src=IP_B, dst=IP_A, flags="DF") / (b"\0" * 1500))
    msg = IcmpMessage.dest_unreachable(FRAGMENTATION_NEEDED, original, next_hop_mtu=1280)
    assert len(msg.quoted) == MAX_QUOTE_LEN  # RFC 1812: the whole error fits in 576 bytes
    buf = bytearray(msg.length)
    msg.emit(buf)
    pkt = _check_against_scapy(msg, bytes(buf))
    assert pkt.nexthopmtu == 1280
    msg = IcmpMessage.time_exceeded(TTL_EXCEEDED, original[:28])
    buf = bytearray(msg.length)
    msg.emit(buf)
    pkt = _check_against_scapy(msg, bytes(buf))
    assert (pkt.type, pkt.code, pkt.unused) == (11, 0, 0)


def test_emit_error_rest_word():
    msg = IcmpMessage.error(PARAMETER_PROBLEM, 0, raw(IP()), rest=20 << 24)
    assert msg.pointer == 20
    buf = bytearray(msg.length)
    msg.emit(buf)
    assert _check_against_scapy(msg, bytes(buf)).ptr == 20


def test_round_trip_keeps_checksum():
    msg = IcmpMessage.echo_request(1, 2, b"abc")
    buf = bytearray(msg.length)
    msg.emit(buf)
    parsed = IcmpMessage.parse(buf)
    assert parsed.checksum == int.from_bytes(buf[2:4], "big")
    assert parsed == IcmpMessage(ECHO_REQUEST, 0, 1, 2, b"abc", parsed.checksum)


@pytest.mark.parametrize("n", range(8))
def test_truncated_at_every_length(n):
    data = raw(ICMP(type=8, id=1, seq=1))
    with pytest.raises(WireError) as e:
        IcmpMessage.parse(data[:n])
    assert e.value.reason == "icmp.truncated"


@pytest.mark.parametrize("at", [0, 2, 3, 7, 8, 12])
def test_bad_checksum(at):
    data = bytearray(raw(ICMP(type=8, id=1, seq=1) / b"hello"))
    data[at] ^= 0x40
    with pytest.raises(WireError) as e:
        IcmpMessage.parse(data)
    assert e.value.reason == "icmp.bad_checksum"
    assert IcmpMessage.parse(data, verify_checksum=False).type in (8, 8 ^ 0x40)


def test_all_zero_message_has_bad_checksum():
    # The correct checksum of an all-zero message is 0xffff, not 0.
    with pytest.raises(WireError) as e:
        IcmpMessage.parse(bytes(8))
    assert e.value.reason == "icmp.bad_checksum"
    assert IcmpMessage.parse(b"\0\0\xff\xff\0\0\0\0").type == ECHO_REPLY


def test_emit_refuses_small_buffer():
    with pytest.raises(ValueError):
        IcmpMessage.echo_request(1, 1, b"abc").emit(bytearray(10))
