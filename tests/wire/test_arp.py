"""ARP (RFC 826): golden who-has/is-at from scapy, emit checked by scapy, malformed packets."""

from __future__ import annotations

import struct

import pytest
from scapy.compat import raw
from scapy.layers.l2 import ARP, Ether

from tests.wire.frames import IP_A, IP_B, MAC_A, MAC_B, golden_frames
from ustack.wire import WireError
from ustack.wire.arp import OP_REPLY, OP_REQUEST, ArpPacket
from ustack.wire.ethernet import BROADCAST, ETHERTYPE_ARP, EthernetHeader, mac_to_bytes
from ustack.wire.ipv4 import ip_to_bytes

A, B = mac_to_bytes(MAC_A), mac_to_bytes(MAC_B)
PA, PB = ip_to_bytes(IP_A), ip_to_bytes(IP_B)


def test_parse_golden_who_has_in_padded_frame():
    frame = golden_frames()["arp_who_has"]
    assert len(frame) == 60
    eth = EthernetHeader.parse(frame)
    assert (eth.dst, eth.src, eth.ethertype) == (BROADCAST, A, ETHERTYPE_ARP)
    arp = ArpPacket.parse(frame[eth.header_len :])  # 18 bytes of padding follow
    assert arp == ArpPacket(OP_REQUEST, A, PA, b"\0" * 6, PB)
    assert arp.is_request and not arp.is_gratuitous
    assert arp.header_len == arp.length == 28


def test_parse_golden_is_at():
    frame = golden_frames()["arp_is_at"]
    arp = ArpPacket.parse(memoryview(frame)[14:])
    assert arp == ArpPacket(OP_REPLY, B, PB, A, PA)
    assert not arp.is_request
    assert all(type(x) is bytes for x in (arp.sha, arp.spa, arp.tha, arp.tpa))


def test_emit_request_dissected_by_scapy():
    buf = bytearray(60)
    n = EthernetHeader(BROADCAST, A, ETHERTYPE_ARP).emit(buf)
    n += ArpPacket.request(A, PA, PB).emit(buf, n)
    assert n == 42
    pkt = Ether(bytes(buf))
    arp = pkt[ARP]
    assert (arp.hwtype, arp.ptype, arp.hwlen, arp.plen, arp.op) == (1, 0x0800, 6, 4, 1)
    assert (arp.hwsrc, arp.psrc, arp.hwdst, arp.pdst) == (MAC_A, IP_A, "00:00:00:00:00:00", IP_B)
    assert bytes(buf[14:42]) == raw(ARP(op=1, hwsrc=MAC_A, psrc=IP_A, hwdst="00:00:00:00:00:00", pdst=IP_B))


def test_reply_to_swaps_per_rfc826():
    request = ArpPacket.parse(golden_frames()["arp_who_has"][14:])
    reply = request.reply_to(B)
    assert reply == ArpPacket(OP_REPLY, B, PB, A, PA)
    buf = bytearray(28)
    assert reply.emit(memoryview(buf)) == 28
    arp = ARP(bytes(buf))
    assert (arp.op, arp.hwsrc, arp.psrc, arp.hwdst, arp.pdst) == (2, MAC_B, IP_B, MAC_A, IP_A)
    # Scapy's own is-at for the same exchange is byte-identical.
    assert bytes(buf) == raw(ARP(op=2, hwsrc=MAC_B, psrc=IP_B, hwdst=MAC_A, pdst=IP_A))


def test_announcement_is_gratuitous():
    arp = ArpPacket.announcement(A, PA)
    assert arp.is_gratuitous and arp.is_request
    buf = bytearray(28)
    arp.emit(buf)
    assert ArpPacket.parse(buf) == arp


def _arp(htype=1, ptype=0x0800, hlen=6, plen=4, op=1) -> bytes:
    return struct.pack("!HHBBH", htype, ptype, hlen, plen, op) + A + PA + b"\0" * 6 + PB


MALFORMED = [
    ("arp.bad_hardware", _arp(htype=6)),
    ("arp.bad_hardware", _arp(htype=0)),
    ("arp.bad_hardware", _arp(hlen=8)),
    ("arp.bad_protocol", _arp(ptype=0x86DD)),
    ("arp.bad_protocol", _arp(plen=16)),
    ("arp.bad_opcode", _arp(op=0)),
    ("arp.bad_opcode", _arp(op=3)),  # RARP request (RFC 903) is not ARP
    ("arp.bad_opcode", _arp(op=0xFFFF)),
]


@pytest.mark.parametrize("reason,data", MALFORMED)
def test_malformed(reason, data):
    with pytest.raises(WireError) as e:
        ArpPacket.parse(data)
    assert e.value.reason == reason


@pytest.mark.parametrize("n", range(28))
def test_truncated_at_every_length(n):
    with pytest.raises(WireError) as e:
        ArpPacket.parse(_arp()[:n])
    assert e.value.reason == "arp.truncated"


def test_emit_refuses_bad_values():
    with pytest.raises(ValueError):
        ArpPacket.request(A, PA, PB).emit(bytearray(27))
    with pytest.raises(ValueError):
        ArpPacket(OP_REQUEST, A, PA + b"\0", b"\0" * 6, PB).emit(bytearray(28))
