"""ustack.wire.push.data_without_push and its C twin (_fastpath.data_without_push, what Stack.poll calls):
a peek at raw frames, every length checked (RFC 9293 3.9.1.2's PSH); both give the same answer for any bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ustack import _fastpath
from ustack.wire import push

IMPLS = [push.data_without_push, _fastpath.data_without_push]

ETH4 = bytes(12) + b"\x08\x00"
ETH6 = bytes(12) + b"\x86\xdd"


def tcp(flags: int, payload: bytes, doff: int = 20) -> bytes:
    return struct.pack("!HHIIBBHHH", 1, 2, 3, 4, doff // 4 << 4, flags, 5, 0, 0) + bytes(doff - 20) + payload


def v4(seg: bytes, frag: int = 0x4000, proto: int = 6, pad: int = 0) -> bytes:
    return ETH4 + struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), 1, frag, 64, proto, 0, bytes(4),
                              bytes(4)) + seg + bytes(pad)


def v6(seg: bytes, nh: int = 6) -> bytes:
    return ETH6 + struct.pack("!IHBB", 6 << 28, len(seg), nh, 64) + bytes(32) + seg


@pytest.mark.parametrize("data_without_push", IMPLS)
@pytest.mark.parametrize("ip", [v4, v6])
def test_data_without_psh_is_mid_write_and_nothing_else_is(ip, data_without_push):
    assert data_without_push(ip(tcp(0x10, b"x" * 100)))
    assert data_without_push(ip(tcp(0x10, b"x", doff=32)))  # with options
    assert not data_without_push(ip(tcp(0x18, b"x" * 100)))  # PSH: the write's end
    assert not data_without_push(ip(tcp(0x10, b"")))  # a pure ACK
    assert not data_without_push(ip(tcp(0x10, b"", doff=32)))
    for other in (0x11, 0x12, 0x14):  # FIN, SYN, RST
        assert not data_without_push(ip(tcp(other, b"x" * 10)))


@pytest.mark.parametrize("data_without_push", IMPLS)
def test_ethernet_padding_is_not_data_and_other_frames_are_not_tcp(data_without_push):
    assert not data_without_push(v4(tcp(0x10, b""), pad=6))  # a 60-byte minimum frame's padding
    assert not data_without_push(v4(tcp(0x10, b"x"), frag=0x2000))  # a first fragment
    assert not data_without_push(v4(tcp(0x10, b"x"), proto=17))
    assert not data_without_push(v6(tcp(0x10, b"x"), nh=0))  # an extension header first
    vlan = bytes(12) + b"\x81\x00" + b"\x00\x01\x08\x00" + v4(tcp(0x10, b"x"))[14:]
    assert not data_without_push(vlan)
    assert not data_without_push(b"")


@pytest.mark.parametrize("data_without_push", IMPLS)
@pytest.mark.parametrize("ip", [v4, v6])
def test_every_truncation_is_answered_without_reading_past_the_end(ip, data_without_push):
    frame = ip(tcp(0x10, b"x" * 40, doff=24))
    for n in range(len(frame)):
        assert data_without_push(memoryview(frame)[:n]) is False  # the IP length says more than is there


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120))
def test_random_bytes_never_raise_and_both_implementations_agree(data):
    for frame in (ETH4 + data, ETH6 + data, data):
        assert push.data_without_push(frame) is _fastpath.data_without_push(frame) in (True, False)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([v4, v6]), st.integers(0, 255), st.integers(0, 60), st.sampled_from([20, 24, 32, 60]),
       st.integers(-4, 4))
def test_both_implementations_agree_on_tcp_frames(ip, flags, payload, doff, cut):
    frame = ip(tcp(flags, b"y" * payload, doff=doff))
    frame = frame[:len(frame) + cut] if cut < 0 else frame + bytes(cut)
    assert push.data_without_push(frame) is _fastpath.data_without_push(frame)
