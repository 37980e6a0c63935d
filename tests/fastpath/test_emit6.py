"""IPv6 emit (_fp_emit6.pxi): frames written from a template are what scapy and our classify expect."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from ustack import _fastpath as fp
from ustack.wire.ipv6 import Ipv6Header

SRC = bytes.fromhex("fd000000000000000000000000000002")
DST = bytes.fromhex("fd000000000000000000000000000001")
MAC_A, MAC_B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")


def template(nh: int, fl: int = 0x12345) -> bytes:
    buf = bytearray(54)
    buf[0:6], buf[6:12], buf[12:14] = MAC_A, MAC_B, b"\x86\xdd"
    Ipv6Header(SRC, DST, nh, 0, 64, 0, fl).emit(buf, 14)
    return bytes(buf)


def _verified(frame: bytes):
    """scapy recomputes the checksum: equal to ours means ours is right."""
    p = Ether(frame)
    l4 = p[IPv6].payload
    csum = l4.chksum
    del l4.chksum
    assert Ether(bytes(p))[IPv6].payload.chksum == csum
    return p


@given(st.integers(1, 65535), st.integers(1, 65535), st.binary(max_size=1400))
def test_emit_udp6_is_what_scapy_and_classify_expect(sport, dport, payload):
    slot = bytearray(2048)
    n = fp.emit_udp6(slot, template(17), sport, dport, payload)
    frame = bytes(slot[:n])
    p = _verified(frame)
    assert (p[IPv6].plen, p[IPv6].fl, p[UDP].sport, p[UDP].dport, bytes(p[UDP].payload)) == \
        (8 + len(payload), 0x12345, sport, dport, payload)
    rec = fp.classify_one(frame, MAC_A)
    assert rec.kind == fp.K_UDP6 and (rec.src, rec.dst, rec.payload_len) == (SRC, DST, len(payload))


@given(st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF), st.sampled_from([0x10, 0x18, 0x11]),
       st.integers(0, 65535), st.one_of(st.none(), st.tuples(st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF))),
       st.binary(max_size=1400))
def test_emit_tcp6_is_what_scapy_and_classify_expect(seq, ack, flags, window, ts, payload):
    slot = bytearray(2048)
    args = (ts[0], ts[1]) if ts else (None, 0)
    n = fp.emit_tcp6(slot, template(6), 5000, 80, seq, ack, flags, window, *args, payload)
    frame = bytes(slot[:n])
    p = _verified(frame)
    t = p[TCP]
    assert (t.seq, t.ack, int(t.flags), t.window, bytes(t.payload)) == (seq, ack, flags, window, payload)
    rec = fp.classify_one(frame, MAC_A)
    assert rec.kind == fp.K_TCP6 and rec.timestamps == (tuple(ts) if ts else None)


def test_emit_ipv6_fills_the_payload_length_and_refuses_bad_input():
    slot = bytearray(100)
    n = fp.emit_ipv6(slot, template(59), b"abc")
    assert n == 57 and slot[18:20] == b"\x00\x03" and bytes(slot[54:57]) == b"abc"
    with pytest.raises(ValueError):
        fp.emit_ipv6(slot, template(59)[:40], b"")
    with pytest.raises(ValueError):
        fp.emit_ipv6(bytearray(55), template(59), b"ab")
    with pytest.raises(ValueError):
        fp.emit_tcp6(slot, template(17), 1, 2, 0, 0, 0x10, 0, None, 0, b"")
