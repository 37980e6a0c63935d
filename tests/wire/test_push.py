"""ustack.wire.push.data_without_push: a peek at raw frames, every length checked (RFC 9293 3.9.1.2's PSH)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ustack.wire.push import data_without_push

ETH4 = bytes(12) + b"\x08\x00"
ETH6 = bytes(12) + b"\x86\xdd"


def tcp(flags: int, payload: bytes, doff: int = 20) -> bytes:
    return struct.pack("!HHIIBBHHH", 1, 2, 3, 4, doff // 4 << 4, flags, 5, 0, 0) + bytes(doff - 20) + payload


def v4(seg: bytes, frag: int = 0x4000, proto: int = 6, pad: int = 0) -> bytes:
    return ETH4 + struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), 1, frag, 64, proto, 0, bytes(4),
                              bytes(4)) + seg + bytes(pad)


def v6(seg: bytes, nh: int = 6) -> bytes:
    return ETH6 + struct.pack("!IHBB", 6 << 28, len(seg), nh, 64) + bytes(32) + seg


@pytest.mark.parametrize("ip", [v4, v6])
def test_data_without_psh_is_mid_write_and_nothing_else_is(ip):
    assert data_without_push(ip(tcp(0x10, b"x" * 100)))
    assert data_without_push(ip(tcp(0x10, b"x", doff=32)))  # with options
    assert not data_without_push(ip(tcp(0x18, b"x" * 100)))  # PSH: the write's end
    assert not data_without_push(ip(tcp(0x10, b"")))  # a pure ACK
    assert not data_without_push(ip(tcp(0x10, b"", doff=32)))
    for other in (0x11, 0x12, 0x14):  # FIN, SYN, RST
        assert not data_without_push(ip(tcp(other, b"x" * 10)))


def test_ethernet_padding_is_not_data_and_other_frames_are_not_tcp():
    assert not data_without_push(v4(tcp(0x10, b""), pad=6))  # a 60-byte minimum frame's padding
    assert not data_without_push(v4(tcp(0x10, b"x"), frag=0x2000))  # a first fragment
    assert not data_without_push(v4(tcp(0x10, b"x"), proto=17))
    assert not data_without_push(v6(tcp(0x10, b"x"), nh=0))  # an extension header first
    vlan = bytes(12) + b"\x81\x00" + b"\x00\x01\x08\x00" + v4(tcp(0x10, b"x"))[14:]
    assert not data_without_push(vlan)
    assert not data_without_push(b"")


@pytest.mark.parametrize("ip", [v4, v6])
def test_every_truncation_is_answered_without_reading_past_the_end(ip):
    frame = ip(tcp(0x10, b"x" * 40, doff=24))
    for n in range(len(frame)):
        assert data_without_push(memoryview(frame)[:n]) is False  # the IP length says more than is there


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120))
def test_random_bytes_never_raise(data):
    assert data_without_push(ETH4 + data) in (True, False)
    assert data_without_push(ETH6 + data) in (True, False)
