"""Drop-in details found by CPython's test_socket (tools/cpython_suites.py): each a stdlib behaviour on the pipe."""

from __future__ import annotations

import socket as std

import pytest

from .test_socket_calls import pair, udp_pair
from .conftest import A


def test_recvmsg_into_a_read_only_buffer_is_refused_before_the_datagram_is_taken(net):
    u1, u2 = udp_pair(*net, 7401)
    try:
        u2.sendto(b"datagram", (A, 7401))
        buf = bytearray(8)
        for bad in ([b"read-only"], [buf, object()], [memoryview(bytearray(16))[::2]]):
            with pytest.raises(TypeError, match="read-write buffers"):
                u1.recvmsg_into(bad)
        assert u1.recvmsg_into([buf])[0] == 8 and buf == b"datagram"  # still queued
    finally:
        u1.close()
        u2.close()


def test_recvmsg_into_a_read_only_buffer_leaves_the_stream_bytes(net):
    cli, srv = pair(*net, 7402)
    try:
        cli.sendall(b"stream bytes")
        with pytest.raises(TypeError):
            srv.recvmsg_into([bytearray(4), b"read-only"])
        a, b = bytearray(6), bytearray(6)
        assert srv.recvmsg_into([a, b])[0] == 12 and a + b == b"stream bytes"
    finally:
        cli.close()
        srv.close()
