"""TCP_CORK, TCP_NODELAY and TCP_QUICKACK through the stream socket, and the reader-waiting hook;
whole stacks over the pipe backend (manual clock, except the one test that needs a blocked thread)."""

from __future__ import annotations

import errno
import socket as std
import threading

import pytest

from tests.stack.netsim import Net
from ustack.api.clock import MonotonicClock
from ustack.api.driver import Driver
from ustack.api.socket import socket as usocket
from ustack.backends.pipe import PipeLink
from ustack.stack import Stack

A = "198.18.0.1"


def pair(net: Net, port: int = 7000):
    """A connected (client on b, server side on a) pair of non-blocking sockets on the manual clock."""
    srv = usocket(net.da)
    srv.bind(("0.0.0.0", port))
    srv.listen(4)
    srv.setblocking(False)
    cli = usocket(net.db)
    cli.setblocking(False)
    assert cli.connect_ex((A, port)) == errno.EINPROGRESS
    assert net.run(until=lambda: cli.connection.connected and srv._listener.readable, max_time=5)
    conn, _ = srv.accept()
    conn.setblocking(False)
    return srv, cli, conn


def test_tcp_cork_through_setsockopt_holds_until_the_cap_or_uncork():
    with Net(delay=0.0001) as net:
        srv, cli, conn = pair(net)
        assert cli.getsockopt(std.IPPROTO_TCP, std.TCP_CORK) == 0
        cli.setsockopt(std.IPPROTO_TCP, std.TCP_CORK, 1)
        assert cli.getsockopt(std.IPPROTO_TCP, std.TCP_CORK) == 1
        assert cli.connection.config.cork is True
        t0 = net.clock.now
        assert cli.send(b"c" * 100) == 100
        assert net.run(until=lambda: conn.connection.readable, max_time=1.0)
        assert net.clock.now - t0 == pytest.approx(0.2 + 0.0001, abs=1e-6)  # the 200 ms cap, then the wire
        assert conn.recv(1000) == b"c" * 100
        assert net.b.stats["tcp.cork_timeouts"] == 1
        # Held again; removing the cork sends it at once.
        assert cli.send(b"d" * 50) == 50
        assert not net.run(until=lambda: conn.connection.readable, max_time=0.1)
        t1 = net.clock.now
        cli.setsockopt(std.IPPROTO_TCP, std.TCP_CORK, 0)
        assert net.run(until=lambda: conn.connection.readable, max_time=1.0)
        assert net.clock.now - t1 == pytest.approx(0.0001, abs=1e-6)
        assert conn.recv(1000) == b"d" * 50
        assert net.b.stats["tcp.cork_timeouts"] == 1


def test_tcp_nodelay_and_quickack_through_setsockopt():
    with Net() as net:
        srv, cli, conn = pair(net)
        assert cli.getsockopt(std.IPPROTO_TCP, std.TCP_NODELAY) == 0
        cli.setsockopt(std.IPPROTO_TCP, std.TCP_NODELAY, 1)
        assert cli.connection.nodelay is True
        assert conn.getsockopt(std.IPPROTO_TCP, std.TCP_QUICKACK) == 1  # not in ping-pong mode
        conn.setsockopt(std.IPPROTO_TCP, std.TCP_QUICKACK, 0)
        assert conn.connection.interactive
        assert conn.getsockopt(std.IPPROTO_TCP, std.TCP_QUICKACK) == 0
        conn.setsockopt(std.IPPROTO_TCP, std.TCP_QUICKACK, 1)
        assert not conn.connection.interactive
        assert conn.getsockopt(std.IPPROTO_TCP, std.TCP_QUICKACK) == 1


def test_a_blocked_recv_tells_the_connection_a_reader_waits():
    clock = MonotonicClock()
    link = PipeLink(clock, delay=0.0001)
    a, b = Stack(link.a, f"{A}/24"), Stack(link.b, "198.18.0.2/24")
    da, db = Driver(a, clock), Driver(b, clock)
    da.start()
    db.start()
    try:
        srv = usocket(da)
        srv.bind(("0.0.0.0", 7001))
        srv.listen(1)
        srv.settimeout(5)
        cli = usocket(db)
        cli.settimeout(5)
        cli.connect((A, 7001))
        conn, _ = srv.accept()
        conn.settimeout(5)
        got = []
        reader = threading.Thread(target=lambda: got.append(conn.recv(100)))
        assert not conn.connection.reader_waiting
        reader.start()
        assert da.wait_until(lambda: conn.connection.reader_waiting, 5.0)
        cli.sendall(b"request")
        reader.join(5)
        assert got == [b"request"]
        assert not conn.connection.reader_waiting
    finally:
        da.close()
        db.close()
        link.close()
