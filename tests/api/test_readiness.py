"""Per-socket readiness fds: one scripted scenario seen through ``selectors``, on kernel sockets and on ustack.

The same script (connect, data, half-close, RST, listen backlog, refused
connect, UDP datagram) runs on kernel sockets over 127.0.0.1 and on ustack
sockets over the pipe backend; after each step the selector must report
exactly the expected events for every registered socket. Both runs check
against the same table, so ustack's fds say what the kernel's say.
"""

from __future__ import annotations

import errno
import resource
import selectors
import socket as std
import struct
import threading
import time

import pytest

from ustack.api.socket import socket as usocket

from .conftest import A

R, W = selectors.EVENT_READ, selectors.EVENT_WRITE
RW = R | W


class Kernel:
    """Kernel sockets on 127.0.0.1."""

    host = "127.0.0.1"

    def tcp(self):
        return std.socket(std.AF_INET, std.SOCK_STREAM)

    def udp(self):
        return std.socket(std.AF_INET, std.SOCK_DGRAM)

    server_tcp = client_tcp = tcp
    server_udp = client_udp = udp


class Ustack:
    """ustack sockets: servers on stack A, clients on stack B."""

    host = A

    def __init__(self, da, db):
        self.da, self.db = da, db

    def server_tcp(self):
        return usocket(self.da)

    def client_tcp(self):
        return usocket(self.db)

    def server_udp(self):
        return usocket(self.da, std.AF_INET, std.SOCK_DGRAM)

    def client_udp(self):
        return usocket(self.db, std.AF_INET, std.SOCK_DGRAM)


class Observer:
    """A DefaultSelector (epoll) over named sockets; ``expect`` waits (bounded) for an exact event table."""

    def __init__(self):
        self.sel = selectors.DefaultSelector()
        self.log: list = []

    def add(self, name: str, sock, events: int) -> None:
        self.sel.register(sock, events, name)

    def drop(self, sock) -> None:
        self.sel.unregister(sock)

    def snapshot(self, timeout: float) -> dict:
        return {key.data: ev for key, ev in self.sel.select(timeout)}

    def expect(self, step: str, table: dict, timeout: float = 3.0) -> None:
        deadline = time.monotonic() + timeout
        got = self.snapshot(0)
        while got != table and time.monotonic() < deadline:
            time.sleep(0.001)  # a bounded wait on a condition (the peer is asynchronous)
            got = self.snapshot(0)
        self.log.append((step, got))
        assert got == table, f"step {step!r}: selector says {got}, expected {table}"

    def close(self) -> None:
        self.sel.close()


def scenario(side) -> list:
    obs = Observer()
    socks = []

    def keep(s):
        socks.append(s)
        return s

    try:
        lst = keep(side.server_tcp())
        lst.bind((side.host, 0))
        lst.listen(8)
        port = lst.getsockname()[1]
        lst.setblocking(False)
        obs.add("L", lst, R)
        obs.expect("listening, nobody waiting", {})

        fresh = keep(side.client_tcp())
        obs.add("F", fresh, RW)
        obs.expect("a fresh socket (Linux: POLLHUP|POLLOUT)", {"F": RW})
        obs.drop(fresh)

        cli = keep(side.client_tcp())
        cli.setblocking(False)
        assert cli.connect_ex((side.host, port)) == errno.EINPROGRESS
        obs.add("C", cli, RW)
        obs.expect("connect finished; one connection to accept", {"L": R, "C": W})

        srv, _ = lst.accept()
        keep(srv)
        srv.setblocking(False)
        obs.add("S", srv, RW)
        obs.expect("accepted", {"C": W, "S": W})

        cli.send(b"hello")
        obs.expect("data for the server", {"C": W, "S": RW})
        assert srv.recv(100) == b"hello"
        obs.expect("data read", {"C": W, "S": W})

        cli.shutdown(std.SHUT_WR)
        obs.expect("client half-closed: EOF readable", {"C": W, "S": RW})
        assert srv.recv(100) == b""
        obs.expect("EOF stays readable", {"C": W, "S": RW})
        srv.send(b"bye")
        obs.expect("the server still talks", {"C": RW, "S": RW})
        assert cli.recv(100) == b"bye"
        obs.expect("reply read", {"C": W, "S": RW})

        # RST: the server aborts a second connection (SO_LINGER 0)
        c2 = keep(side.client_tcp())
        c2.settimeout(5)
        c2.connect((side.host, port))
        obs.expect("second connection waits", {"L": R, "C": W, "S": RW})  # the handshake's last ACK is in
        s2, _ = lst.accept()
        obs.add("C2", c2, R)
        obs.expect("second connection idle", {"C": W, "S": RW})
        s2.setsockopt(std.SOL_SOCKET, std.SO_LINGER, struct.pack("ii", 1, 0))
        s2.close()
        obs.expect("reset: readable", {"C": W, "S": RW, "C2": R})
        c2.setblocking(False)
        with pytest.raises(ConnectionResetError):
            c2.recv(100)
        obs.drop(c2)

        # listen backlog: two connections wait, each accept takes one
        waiting = []
        for _ in range(2):
            c = keep(side.client_tcp())
            c.settimeout(5)
            c.connect((side.host, port))
            waiting.append(c)
        obs.expect("two waiting", {"L": R, "C": W, "S": RW})
        keep(lst.accept()[0])
        obs.expect("one left", {"L": R, "C": W, "S": RW})
        keep(lst.accept()[0])
        obs.expect("queue empty", {"C": W, "S": RW})
        with pytest.raises(BlockingIOError):
            lst.accept()

        # a refused connect: readable and writable, SO_ERROR says why
        probe = keep(side.server_tcp())
        probe.bind((side.host, 0))
        closed_port = probe.getsockname()[1]
        probe.close()
        c3 = keep(side.client_tcp())
        c3.setblocking(False)
        assert c3.connect_ex((side.host, closed_port)) in (errno.EINPROGRESS, errno.ECONNREFUSED)
        obs.add("C3", c3, RW)
        obs.expect("refused", {"C": W, "S": RW, "C3": RW})
        assert c3.getsockopt(std.SOL_SOCKET, std.SO_ERROR) in (errno.ECONNREFUSED, 0)
        obs.drop(c3)

        # UDP: a datagram makes the receiver readable; reading it clears that
        u1 = keep(side.server_udp())
        u1.bind((side.host, 0))
        u1.setblocking(False)
        u2 = keep(side.client_udp())
        obs.add("U", u1, RW)
        obs.expect("udp idle", {"C": W, "S": RW, "U": W})
        u2.sendto(b"datagram", u1.getsockname())
        obs.expect("udp datagram", {"C": W, "S": RW, "U": RW})
        assert u1.recvfrom(100)[0] == b"datagram"
        obs.expect("udp read", {"C": W, "S": RW, "U": W})
        return [step for step, _ in obs.log]
    finally:
        obs.close()
        for s in socks:
            s.close()


def test_scenario_on_kernel_sockets():
    scenario(Kernel())


def test_scenario_on_ustack_sockets_gives_the_same_events(net):
    kernel_steps = scenario(Kernel())
    assert scenario(Ustack(*net)) == kernel_steps


def test_each_socket_has_its_own_fd_and_select_poll_agree(net):
    da, db = net
    socks = [usocket(da) for _ in range(3)] + [usocket(db, std.AF_INET, std.SOCK_DGRAM)]
    try:
        fds = [s.fileno() for s in socks]
        assert len(set(fds)) == len(fds) and da.stack.device.fileno() not in fds
        sel = selectors.SelectSelector()
        for s in socks:
            sel.register(s, RW)  # a second socket no longer collides (KeyError) with the first
        ready = {key.fileobj: ev for key, ev in sel.select(0)}
        assert ready[socks[3]] == W  # UDP: nothing to read, always writable
        sel.close()
    finally:
        for s in socks:
            s.close()
    assert all(s.fileno() == -1 for s in socks)


def test_write_readiness_follows_the_send_buffer(net):
    da, db = net
    lst = usocket(da)
    lst.bind(("0.0.0.0", 7100))
    lst.listen(1)
    cli = usocket(db)
    cli.setsockopt(std.SOL_SOCKET, std.SO_SNDBUF, 4096)
    cli.settimeout(5)
    cli.connect((A, 7100))
    srv, _ = lst.accept()
    sel = selectors.DefaultSelector()
    sel.register(cli, W)
    try:
        assert sel.select(0) == [(sel.get_key(cli), W)]
        cli.setblocking(False)
        sent = 0
        with pytest.raises(BlockingIOError):
            while True:  # the server reads nothing: the send buffer and the peer's window fill
                sent += cli.send(b"x" * 4096)
        assert sel.select(0) == []  # full: not writable
        got = 0
        srv.settimeout(5)
        while got < sent:
            got += len(srv.recv(65536))
        assert got == sent
        assert sel.select(5) == [(sel.get_key(cli), W)]  # drained and acknowledged: writable again
    finally:
        sel.close()
        for s in (cli, srv, lst):
            s.close()


def test_select_wakes_when_data_arrives_and_idles_without_cpu(net):
    da, db = net
    u1 = usocket(da, std.AF_INET, std.SOCK_DGRAM)
    u1.bind(("0.0.0.0", 7200))
    u2 = usocket(db, std.AF_INET, std.SOCK_DGRAM)
    try:
        fd = u1.fileno()
        before = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.monotonic()
        import select

        assert select.select([fd], [], [], 1.0)[0] == []  # idle: the drivers sleep, select sleeps
        idle = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        assert idle >= 0.9 and cpu < 0.25 * idle, f"{cpu:.3f} s CPU in {idle:.3f} s idle"

        timer = threading.Timer(0.2, lambda: u2.sendto(b"wake", (A, 7200)))
        timer.start()
        t0 = time.monotonic()
        assert select.select([fd], [], [], 5.0)[0] == [fd]
        assert time.monotonic() - t0 < 2.0
        assert u1.recv(10) == b"wake"
        assert select.select([fd], [], [], 0)[0] == []
        timer.join()
    finally:
        u1.close()
        u2.close()
