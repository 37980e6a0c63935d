"""AF_INET6 sockets between two stacks over the pipe on a real clock (driver threads): dual-stack by
default, IPV6_V6ONLY, IPv4 peers reported as ::ffff:a.b.c.d, 4-tuple addresses, UDP and TCP exact."""

from __future__ import annotations

import errno
import hashlib
import socket as std

import pytest

from ustack.api.clock import MonotonicClock
from ustack.api.driver import Driver
from ustack.api.socket import socket as usocket
from ustack.backends.pipe import PipeLink
from ustack.stack import Stack

A4, B4, A6, B6 = "198.18.0.1", "198.18.0.2", "fd00::1", "fd00::2"


@pytest.fixture
def net():
    clock = MonotonicClock()
    link = PipeLink(clock, delay=0.0002)
    a = Stack(link.a, [f"{A4}/24", f"{A6}/64"])
    b = Stack(link.b, [f"{B4}/24", f"{B6}/64"])
    da, db = Driver(a, clock), Driver(b, clock)
    da.start()
    db.start()
    for d in (da, db):  # duplicate address detection (RFC 4862) before the sockets
        assert d.wait_until(lambda d=d: d.stack.iface6.link_local is not None and not any(
            e.state == "tentative" for e in d.stack.iface6.addresses.values()), 5)
    yield da, db
    da.close()
    db.close()
    link.close()


def test_tcp_dual_stack_listener_hears_both_families(net):
    a, b = net
    srv = usocket(a, std.AF_INET6)
    srv.bind(("::", 7000))
    srv.listen()
    srv.settimeout(5)
    assert srv.getsockname() == ("::", 7000, 0, 0)
    data = hashlib.sha256(b"six").digest() * 8000  # 256 KB
    c6 = usocket(b, std.AF_INET6)
    c6.settimeout(5)
    c6.connect((A6, 7000))
    conn, addr = srv.accept()
    assert addr == (B6, c6.getsockname()[1], 0, 0) and c6.getpeername() == (A6, 7000, 0, 0)
    c6.sendall(data)
    c6.shutdown(std.SHUT_WR)
    got = bytearray()
    conn.settimeout(5)
    while chunk := conn.recv(65536):
        got += chunk
    assert bytes(got) == data
    conn.sendall(data[::-1])
    conn.close()
    back = bytearray()
    while chunk := c6.recv(65536):
        back += chunk
    assert bytes(back) == data[::-1]
    # An IPv4 client reaches the same listener; the server sees it as ::ffff:198.18.0.2.
    c4 = usocket(b, std.AF_INET)
    c4.settimeout(5)
    c4.connect((A4, 7000))
    conn4, addr4 = srv.accept()
    assert addr4 == ("::ffff:" + B4, c4.getsockname()[1], 0, 0)
    assert conn4.getsockname() == ("::ffff:" + A4, 7000, 0, 0)
    c4.sendall(b"v4 over a v6 socket")
    conn4.settimeout(5)
    assert conn4.recv(100) == b"v4 over a v6 socket"
    for s in (c6, c4, conn4, srv):
        s.close()


def test_v6only_listener_refuses_ipv4(net):
    a, b = net
    srv = usocket(a, std.AF_INET6)
    srv.setsockopt(std.IPPROTO_IPV6, std.IPV6_V6ONLY, 1)
    assert srv.getsockopt(std.IPPROTO_IPV6, std.IPV6_V6ONLY) == 1
    srv.bind(("::", 7001))
    srv.listen()
    c4 = usocket(b, std.AF_INET)
    c4.settimeout(5)
    with pytest.raises(ConnectionRefusedError):
        c4.connect((A4, 7001))
    with pytest.raises(OSError) as e:
        srv.setsockopt(std.IPPROTO_IPV6, std.IPV6_V6ONLY, 0)
    assert e.value.errno == errno.EINVAL
    v4 = usocket(a, std.AF_INET)
    with pytest.raises(OSError) as e:
        v4.setsockopt(std.IPPROTO_IPV6, std.IPV6_V6ONLY, 1)
    assert e.value.errno == errno.ENOPROTOOPT
    for s in (srv, c4, v4):
        s.close()


def test_udp_v6_socket_both_families_and_fragments(net):
    a, b = net
    srv = usocket(a, std.AF_INET6, std.SOCK_DGRAM)
    srv.bind(("", 5353))
    srv.settimeout(5)
    cli = usocket(b, std.AF_INET6, std.SOCK_DGRAM)
    cli.settimeout(5)
    big = bytes(range(256)) * 40  # 10240 bytes: fragmented
    cli.sendto(big, (A6, 5353))
    data, addr = srv.recvfrom(65536)
    assert data == big and addr[0] == B6 and len(addr) == 4
    srv.sendto(b"back", addr)
    assert cli.recvfrom(100) == (b"back", (A6, 5353, 0, 0))
    cli.sendto(b"to v4 through the v6 socket", ("::ffff:" + A4, 5353))
    data, addr = srv.recvfrom(100)
    assert data == b"to v4 through the v6 socket" and addr[0] == "::ffff:" + B4
    with pytest.raises(std.gaierror):
        cli.sendto(b"x", (A4, 5353))  # an AF_INET6 socket takes IPv6 literals (as inet_pton(AF_INET6))
    srv.close()
    cli.close()


def test_patch_puts_af_inet6_on_a_stack_with_ipv6_and_keeps_loopback_on_the_kernel(net):
    import ustack

    a, b = net
    srv = usocket(a, std.AF_INET6, std.SOCK_DGRAM)
    srv.bind(("::", 6000))
    srv.settimeout(5)
    cls = ustack.patch(b)
    try:
        s = std.socket(std.AF_INET6, std.SOCK_DGRAM)  # the stdlib's name, patched
        assert type(s) is cls
        s.setsockopt(std.IPPROTO_IPV6, std.IPV6_V6ONLY, 0)  # recorded, replayed on the ustack socket
        s.sendto(b"through the patch", (A6, 6000))
        assert s._u is not None and s._u.family == std.AF_INET6
        data, addr = srv.recvfrom(100)
        assert data == b"through the patch" and addr[0] == B6
        from ustack.api.patch import _is_loopback
        assert _is_loopback(("::1", 80)) and _is_loopback(("::ffff:127.0.0.1", 80)) and not _is_loopback((A6, 80))
        s.close()
    finally:
        ustack.unpatch()
        srv.close()
