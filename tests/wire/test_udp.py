"""UDP (RFC 768): golden datagrams from scapy, emit checked by scapy, malformed datagrams."""

from __future__ import annotations

import struct

import pytest
from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from tests.wire.frames import IP_A, IP_B, IP_C, golden_frames
from ustack.wire import WireError
from ustack.wire.checksum import ones_sum, pseudo_header_sum
from ustack.wire.ethernet import EthernetHeader
from ustack.wire.ipv4 import PROTO_UDP, Ipv4Header, ip_to_bytes
from ustack.wire.udp import UdpHeader

PA, PB, PC = ip_to_bytes(IP_A), ip_to_bytes(IP_B), ip_to_bytes(IP_C)


def scapy_checksum(src: str, dst: str, datagram: bytes) -> int:
    """The UDP checksum scapy computes for this datagram between these addresses."""
    pkt = IP(src=src, dst=dst) / UDP(datagram)
    del pkt[UDP].chksum
    return IP(raw(pkt))[UDP].chksum


def _chain(frame: bytes):
    eth = EthernetHeader.parse(frame)
    ip_bytes = memoryview(frame)[eth.header_len :]
    ip = Ipv4Header.parse(ip_bytes)
    assert ip.proto == PROTO_UDP
    dgram = ip.payload(ip_bytes)
    return ip, dgram, UdpHeader.parse(dgram, ip.src, ip.dst)


@pytest.mark.parametrize("name,sport,dport,payload", [
    ("udp", 40000, 7, b"hello, world"),
    ("udp_options", 5353, 5353, b"opts"),
    ("vlan_udp", 1000, 2000, b"tagged"),
    ("udp_nochecksum", 9, 9, b"abc"),
    ("udp_padded", 1, 2, b"x"),
])
def test_parse_golden(name, sport, dport, payload):
    frame = golden_frames()[name]
    ip, dgram, udp = _chain(frame)
    ref = Ether(frame)[UDP]
    assert udp == UdpHeader(sport, dport, 8 + len(payload), ref.chksum)
    assert udp.header_len == 8 and udp.payload_len == len(payload)
    assert bytes(udp.payload(dgram)) == payload


def test_padding_past_length_is_ignored():
    data = raw(IP(src=IP_A, dst=IP_B) / UDP(sport=1, dport=2) / b"data")[20:]
    udp = UdpHeader.parse(data + b"\xde\xad\xbe\xef", PA, PB)
    assert udp.length == 12
    assert bytes(udp.payload(data + b"\xde\xad")) == b"data"


def test_zero_checksum_means_none():
    data = raw(IP(src=IP_A, dst=IP_B) / UDP(sport=1, dport=2, chksum=0) / b"data")[20:]
    assert UdpHeader.parse(data, PC, PC).checksum == 0  # no check at all, even with wrong addresses


def _emit_and_check(hdr: UdpHeader, payload: bytes, *, in_place: bool, offset: int = 0) -> bytes:
    buf = bytearray(b"\x77" * (offset + hdr.length + 4))
    if in_place:
        buf[offset + 8 : offset + hdr.length] = payload
        n = hdr.emit(memoryview(buf), offset, PA, PB)
    else:
        n = hdr.emit(buf, offset, PA, PB, payload=payload)
    assert n == 8
    assert buf[:offset] == b"\x77" * offset and buf[offset + hdr.length :] == b"\x77" * 4
    dgram = bytes(buf[offset : offset + hdr.length])
    pkt = UDP(dgram)
    assert (pkt.sport, pkt.dport, pkt.len, bytes(pkt.payload)) == (hdr.src_port, hdr.dst_port, hdr.length, payload)
    assert pkt.chksum == scapy_checksum(IP_A, IP_B, dgram)
    assert dgram == raw(IP(src=IP_A, dst=IP_B) / UDP(sport=hdr.src_port, dport=hdr.dst_port) / payload)[20:]
    return dgram


@pytest.mark.parametrize("payload", [b"", b"a", b"even", bytes(range(256)) * 4 + b"odd"])
@pytest.mark.parametrize("in_place", [True, False])
def test_emit_dissected_by_scapy(payload, in_place):
    hdr = UdpHeader(40001, 53, 8 + len(payload))
    dgram = _emit_and_check(hdr, payload, in_place=in_place, offset=5)
    assert UdpHeader.parse(dgram, PA, PB) == UdpHeader(40001, 53, hdr.length, scapy_checksum(IP_A, IP_B, dgram))


def test_computed_zero_checksum_is_sent_as_all_ones():
    # Choose the payload word that makes the ones'-complement sum 0xffff, so
    # the computed checksum is 0 and must go out as 0xffff (RFC 768).
    hdr = UdpHeader(1234, 5678, 10)
    s = ones_sum(struct.pack("!HHHH", 1234, 5678, 10, 0), pseudo_header_sum(PA, PB, PROTO_UDP, 10))
    payload = (0xFFFF - s if s != 0xFFFF else 0xFFFF).to_bytes(2, "big")
    buf = bytearray(10)
    hdr.emit(buf, 0, PA, PB, payload=payload)
    assert buf[6:8] == b"\xff\xff"
    assert UDP(bytes(buf)).chksum == 0xFFFF == scapy_checksum(IP_A, IP_B, bytes(buf))
    assert UdpHeader.parse(buf, PA, PB).checksum == 0xFFFF


def test_emit_without_checksum():
    buf = bytearray(11)
    UdpHeader(1, 2, 11).emit(buf, 0, PA, PB, payload=b"abc", with_checksum=False)
    assert buf[6:8] == b"\0\0"
    assert UDP(bytes(buf)).chksum == 0


def test_full_frame_from_our_emitters_dissected_by_scapy():
    from ustack.wire.ethernet import ETHERTYPE_IPV4, mac_to_bytes

    payload = b"through the whole stack of emitters"
    udp = UdpHeader(7777, 8888, 8 + len(payload))
    ip = Ipv4Header(total_length=20 + udp.length, ident=9, flags_df=True, ttl=64, proto=PROTO_UDP, src=PA, dst=PB)
    eth = EthernetHeader(mac_to_bytes("02:00:00:00:00:02"), mac_to_bytes("02:00:00:00:00:01"), ETHERTYPE_IPV4, vlan_id=7)
    buf = bytearray(eth.header_len + ip.total_length)
    off = eth.emit(buf)
    off += ip.emit(buf, off)
    udp.emit(buf, off, PA, PB, payload=payload)
    pkt = Ether(bytes(buf))
    assert pkt.vlan == 7
    assert (pkt[IP].src, pkt[IP].dst, pkt[UDP].sport, pkt[UDP].dport) == (IP_A, IP_B, 7777, 8888)
    assert bytes(pkt[UDP].payload) == payload
    del pkt[IP].chksum
    del pkt[UDP].chksum
    assert raw(pkt) == bytes(buf)  # scapy recomputes both checksums to the same bytes


def _udp(length_field: int, payload: bytes = b"", checksum: int = 0) -> bytes:
    return struct.pack("!HHHH", 1, 2, length_field, checksum) + payload


def _good() -> bytes:
    return raw(IP(src=IP_A, dst=IP_B) / UDP(sport=1, dport=2) / b"payload")[20:]


def _flip(data: bytes, at: int) -> bytes:
    b = bytearray(data)
    b[at] ^= 0x10
    return bytes(b)


MALFORMED = [
    ("udp.bad_length", _udp(7, b"x")),
    ("udp.bad_length", _udp(0)),
    ("udp.bad_length", _udp(12, b"abc")),  # beyond the IP payload
    ("udp.bad_length", _udp(0xFFFF, b"abc")),
    ("udp.bad_checksum", _flip(_good(), 8)),  # payload byte
    ("udp.bad_checksum", _flip(_good(), 6)),  # checksum field
    ("udp.bad_checksum", _flip(_good(), 0)),  # source port
]


@pytest.mark.parametrize("reason,data", MALFORMED)
def test_malformed(reason, data):
    with pytest.raises(WireError) as e:
        UdpHeader.parse(data, PA, PB)
    assert e.value.reason == reason


def test_pseudo_header_is_checked():
    with pytest.raises(WireError) as e:
        UdpHeader.parse(_good(), PA, PC)  # delivered to the wrong destination
    assert e.value.reason == "udp.bad_checksum"
    assert UdpHeader.parse(_good(), PA, PC, verify_checksum=False).dst_port == 2


def test_checksum_covers_only_length_bytes():
    good = _good()
    # A shorter length field makes the tail padding; the checksum no longer matches.
    short = bytearray(good)
    short[4:6] = (len(good) - 1).to_bytes(2, "big")
    with pytest.raises(WireError) as e:
        UdpHeader.parse(short, PA, PB)
    assert e.value.reason == "udp.bad_checksum"


@pytest.mark.parametrize("n", range(8))
def test_truncated_at_every_length(n):
    with pytest.raises(WireError) as e:
        UdpHeader.parse(_good()[:n], PA, PB)
    assert e.value.reason == "udp.truncated"


def test_emit_refuses_bad_values():
    with pytest.raises(ValueError):
        UdpHeader(1, 2, 12).emit(bytearray(11), 0, PA, PB)  # buffer shorter than the datagram
    with pytest.raises(ValueError):
        UdpHeader(1, 2, 12).emit(bytearray(12), 0, PA, PB, payload=b"abc")  # payload != length - 8
    with pytest.raises(ValueError):
        UdpHeader(1, 2, 7).emit(bytearray(12), 0, PA, PB)
    with pytest.raises(ValueError):
        UdpHeader(1, 2, 8).emit(bytearray(8), 0, PA[:3], PB)
