"""TCP stream sockets with the stdlib's shape, between two stacks over the pipe on a real clock."""

from __future__ import annotations

import errno
import socket as std
import struct
import threading
import time

import pytest

from ustack.backends.pipe import PipeLink
from ustack.api.clock import MonotonicClock
from ustack.api.driver import Driver
from ustack.api.socket import socket as usocket
from ustack.stack import Stack
from ustack.api.stream import StreamSocket

A, B = "198.18.0.1", "198.18.0.2"


@pytest.fixture
def net():
    clock = MonotonicClock()
    link = PipeLink(clock, delay=0.0002)
    a = Stack(link.a, f"{A}/24")
    b = Stack(link.b, f"{B}/24")
    da, db = Driver(a, clock), Driver(b, clock)
    da.start()
    db.start()
    yield da, db
    da.close()
    db.close()
    link.close()


def listener(stack, port=7000, backlog=8):
    s = usocket(stack)
    s.bind(("0.0.0.0", port))
    s.listen(backlog)
    s.settimeout(5)
    return s


def connected_pair(a, b, port=7000):
    srv = listener(a, port)
    cli = usocket(b)
    cli.settimeout(5)
    cli.connect((A, port))
    conn, addr = srv.accept()
    conn.settimeout(5)
    return srv, cli, conn, addr


def test_default_type_is_stream_and_addresses_are_reported(net):
    a, b = net
    srv, cli, conn, addr = connected_pair(a, b)
    assert isinstance(cli, StreamSocket) and cli.type == std.SOCK_STREAM
    assert addr == cli.getsockname() and addr[0] == B
    assert cli.getpeername() == (A, 7000) == conn.getsockname()
    assert srv.getsockname() == ("0.0.0.0", 7000)


def test_send_recv_exact_and_half_close_both_ways(net):
    a, b = net
    srv, cli, conn, _ = connected_pair(a, b)
    cli.sendall(b"request" * 1000)
    cli.shutdown(std.SHUT_WR)  # client half-closes; server still talks
    got = bytearray()
    while True:
        d = conn.recv(65536)
        if not d:
            break
        got += d
    assert got == b"request" * 1000
    conn.sendall(b"response")
    conn.shutdown(std.SHUT_WR)
    assert cli.recv(100) == b"response"
    assert cli.recv(100) == b""  # EOF
    buf = bytearray(10)
    assert cli.recv_into(buf) == 0


def test_connection_refused_blocking_and_connect_ex(net):
    a, b = net
    s = usocket(b)
    s.settimeout(5)
    with pytest.raises(ConnectionRefusedError):
        s.connect((A, 1))
    s2 = usocket(b)
    s2.settimeout(5)
    assert s2.connect_ex((A, 2)) == errno.ECONNREFUSED


def test_nonblocking_connect_reports_in_progress_then_completes(net):
    a, b = net
    srv = listener(a)
    s = usocket(b)
    s.setblocking(False)
    with pytest.raises(BlockingIOError) as e:
        s.connect((A, 7000))
    assert e.value.errno == errno.EINPROGRESS
    deadline = time.monotonic() + 5
    while (rc := s.connect_ex((A, 7000))) != 0:
        assert rc == errno.EALREADY and time.monotonic() < deadline
        time.sleep(0.001)
    assert s.connect_ex((A, 7000)) == errno.EISCONN  # as Linux: 0 once, then EISCONN
    conn, _ = srv.accept()
    with pytest.raises(BlockingIOError):
        s.recv(10)  # nothing to read, non-blocking


def test_connect_timeout_raises_timeouterror(net):
    a, b = net
    s = usocket(b)
    s.settimeout(0.3)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        s.connect(("198.18.0.77", 80))  # nobody answers ARP
    assert time.monotonic() - t0 < 3


def test_recv_timeout(net):
    a, b = net
    srv, cli, conn, _ = connected_pair(a, b)
    cli.settimeout(0.1)
    with pytest.raises(TimeoutError):
        cli.recv(10)


def test_so_linger_zero_sends_rst_and_peer_sees_reset(net):
    a, b = net
    srv, cli, conn, _ = connected_pair(a, b)
    conn.setsockopt(std.SOL_SOCKET, std.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()
    with pytest.raises(ConnectionResetError):
        cli.recv(10)


def test_send_after_peer_reset_is_broken_pipe(net):
    a, b = net
    srv, cli, conn, _ = connected_pair(a, b)
    conn.setsockopt(std.SOL_SOCKET, std.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()
    deadline = time.monotonic() + 5
    with pytest.raises((ConnectionResetError, BrokenPipeError)):
        while time.monotonic() < deadline:
            cli.send(b"x")
            time.sleep(0.01)
    with pytest.raises(BrokenPipeError):
        cli.send(b"x")


def test_socket_options(net):
    a, b = net
    srv, cli, conn, _ = connected_pair(a, b)
    assert cli.getsockopt(std.IPPROTO_TCP, std.TCP_NODELAY) == 0
    cli.setsockopt(std.IPPROTO_TCP, std.TCP_NODELAY, 1)
    assert cli.getsockopt(std.IPPROTO_TCP, std.TCP_NODELAY) == 1
    assert cli.connection.nodelay is True
    cli.setsockopt(std.SOL_SOCKET, std.SO_RCVBUF, 65536)
    assert cli.getsockopt(std.SOL_SOCKET, std.SO_RCVBUF) == 131072  # doubled, as Linux does
    cli.setsockopt(std.SOL_SOCKET, std.SO_KEEPALIVE, 1)
    assert cli.getsockopt(std.SOL_SOCKET, std.SO_KEEPALIVE) == 1
    assert cli.getsockopt(std.SOL_SOCKET, std.SO_ERROR) == 0
    with pytest.raises(OSError) as e:
        cli.setsockopt(std.SOL_SOCKET, std.SO_BROADCAST, 1)
    assert e.value.errno == errno.ENOPROTOOPT


def test_bind_conflict_and_reuse(net):
    a, b = net
    srv = listener(a, 7100)
    s = usocket(a)
    with pytest.raises(OSError) as e:
        s.bind(("0.0.0.0", 7100))
    assert e.value.errno == errno.EADDRINUSE
    srv.close()
    s.bind(("0.0.0.0", 7100))  # free again after the listener closed


def test_tcp_info_and_flow_control_callbacks(net):
    a, b = net
    srv, cli, conn, _ = connected_pair(a, b)
    high = threading.Event()
    low = threading.Event()
    conn.on_recv_high_water(lambda sock: high.set(), high_water=100_000)
    cli.on_send_low_water(lambda sock: low.set(), low_water=0)
    cli.sendall(b"z" * 200_000)
    assert high.wait(5)
    got = 0
    while got < 200_000:
        got += len(conn.recv(65536))
    assert low.wait(5)
    info = cli.tcp_info()
    assert info.state == "ESTABLISHED" and info.bytes_acked >= 200_000
    assert info.snd_mss == 1460 - 12  # timestamps take 12 bytes of the MSS
    assert info.srtt > 0 and info.rto >= 0.2 and info.cwnd > 0
    cli.configure(congestion="cubic", delayed_ack=False)
    assert cli.tcp_info().congestion == "cubic"


def test_accept_queue_backlog_and_many_clients(net):
    a, b = net
    srv = listener(a, 7200, backlog=16)
    clients = []
    for _ in range(10):
        c = usocket(b)
        c.settimeout(5)
        c.connect((A, 7200))
        clients.append(c)
    accepted = [srv.accept()[0] for _ in range(10)]
    ports = sorted(s.getpeername()[1] for s in accepted)
    assert ports == sorted(c.getsockname()[1] for c in clients)
    for c in clients:
        c.sendall(c.getsockname()[1].to_bytes(2, "big"))
    for s in accepted:
        assert int.from_bytes(s.recv(2), "big") == s.getpeername()[1]
