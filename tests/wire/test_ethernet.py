"""Ethernet II and 802.1Q: golden frames from scapy, emit checked by scapy, truncation."""

from __future__ import annotations

import pytest
from scapy.compat import raw
from scapy.layers.l2 import ARP, Dot1Q, Ether

from tests.wire.frames import MAC_A, MAC_B
from ustack.wire import WireError
from ustack.wire.ethernet import (
    BROADCAST,
    ETHERTYPE_ARP,
    ETHERTYPE_IPV4,
    ETHERTYPE_VLAN,
    EthernetHeader,
    bytes_to_mac,
    mac_to_bytes,
)

A = mac_to_bytes(MAC_A)
B = mac_to_bytes(MAC_B)


def test_mac_helpers():
    assert A == bytes.fromhex("02000000000a")
    assert bytes_to_mac(A) == MAC_A
    assert mac_to_bytes("02-00-00-00-00-0A") == A
    for bad in ("02:00:00:00:00", "02:00:00:00:00:0a:01", "0200:00:00:00:0a:", "zz:00:00:00:00:0a"):
        with pytest.raises(ValueError):
            mac_to_bytes(bad)


@pytest.mark.parametrize("view", [bytes, bytearray, memoryview])
def test_parse_golden_untagged(view):
    frame = raw(Ether(src=MAC_A, dst=MAC_B, type=0x0800) / (b"\x45" + b"\0" * 45))
    eth = EthernetHeader.parse(view(frame))
    assert eth == EthernetHeader(B, A, ETHERTYPE_IPV4)
    assert type(eth.dst) is bytes and type(eth.src) is bytes
    assert eth.vlan_id is None
    assert eth.header_len == eth.length == 14


def test_parse_golden_802_1q():
    frame = raw(Ether(src=MAC_A, dst="ff:ff:ff:ff:ff:ff") / Dot1Q(vlan=0xABC, prio=5, dei=1) / ARP())
    eth = EthernetHeader.parse(frame)
    assert eth.dst == BROADCAST
    assert eth.src == A
    assert eth.ethertype == ETHERTYPE_ARP
    assert (eth.vlan_id, eth.vlan_pcp, eth.vlan_dei) == (0xABC, 5, True)
    assert eth.header_len == 18
    assert frame[eth.header_len :] == raw(ARP())


def test_vlan_id_zero_is_still_tagged():
    # A priority tag (VID 0) is a tag: the header is 18 bytes.
    eth = EthernetHeader.parse(raw(Ether() / Dot1Q(vlan=0, prio=6) / (b"\0" * 46)))
    assert (eth.vlan_id, eth.vlan_pcp, eth.header_len) == (0, 6, 18)


def test_only_one_tag_is_understood():
    eth = EthernetHeader.parse(raw(Ether() / Dot1Q(vlan=1) / Dot1Q(vlan=2) / (b"\0" * 40)))
    assert (eth.vlan_id, eth.ethertype, eth.header_len) == (1, ETHERTYPE_VLAN, 18)


def test_emit_untagged_dissected_by_scapy():
    buf = bytearray(b"\xee" * 40)
    n = EthernetHeader(B, A, ETHERTYPE_IPV4).emit(buf, 3)
    assert n == 14
    assert buf[:3] == b"\xee" * 3 and buf[17:] == b"\xee" * 23
    pkt = Ether(bytes(buf[3:]))
    assert (pkt.dst, pkt.src, pkt.type) == (MAC_B, MAC_A, 0x0800)
    assert bytes(buf[3:17]) == raw(Ether(dst=MAC_B, src=MAC_A, type=0x0800))


def test_emit_tagged_dissected_by_scapy():
    buf = bytearray(64)
    n = EthernetHeader(B, A, ETHERTYPE_ARP, vlan_id=42, vlan_pcp=7, vlan_dei=True).emit(memoryview(buf))
    assert n == 18
    pkt = Ether(bytes(buf))
    assert pkt.type == 0x8100
    tag = pkt[Dot1Q]
    assert (tag.vlan, tag.prio, tag.dei, tag.type) == (42, 7, 1, 0x0806)
    assert bytes(buf[:18]) == raw(Ether(dst=MAC_B, src=MAC_A) / Dot1Q(vlan=42, prio=7, dei=1, type=0x0806))


@pytest.mark.parametrize("hdr", [
    EthernetHeader(B, A, ETHERTYPE_IPV4),
    EthernetHeader(BROADCAST, A, ETHERTYPE_ARP, vlan_id=4095, vlan_pcp=1),
])
def test_round_trip(hdr):
    buf = bytearray(hdr.header_len)
    hdr.emit(buf)
    assert EthernetHeader.parse(buf) == hdr


@pytest.mark.parametrize("n", range(14))
def test_truncated_untagged(n):
    frame = raw(Ether(src=MAC_A, dst=MAC_B) / (b"\0" * 46))
    with pytest.raises(WireError) as e:
        EthernetHeader.parse(frame[:n])
    assert e.value.reason == "eth.truncated"


@pytest.mark.parametrize("n", range(14, 18))
def test_truncated_in_tag(n):
    frame = raw(Ether(src=MAC_A, dst=MAC_B) / Dot1Q(vlan=5) / (b"\0" * 42))
    with pytest.raises(WireError) as e:
        EthernetHeader.parse(frame[:n])
    assert e.value.reason == "eth.truncated"


def test_emit_refuses_bad_values():
    with pytest.raises(ValueError):
        EthernetHeader(B, A, ETHERTYPE_IPV4).emit(bytearray(13))
    with pytest.raises(ValueError):
        EthernetHeader(B, A, ETHERTYPE_IPV4, vlan_id=1).emit(bytearray(17))
    with pytest.raises(ValueError):
        EthernetHeader(B[:5], A, ETHERTYPE_IPV4).emit(bytearray(14))
    with pytest.raises(ValueError):
        EthernetHeader(B, A, ETHERTYPE_IPV4, vlan_id=4096).emit(bytearray(18))
