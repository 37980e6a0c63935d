"""Readiness fds on a ManualClock: no background thread, every transition at the round that causes it."""

from __future__ import annotations

import errno
import select
import socket as std

from ustack.api.socket import socket as usocket

from tests.stack.netsim import Net


def state(fd) -> str:
    p = select.poll()
    p.register(fd, select.POLLIN | select.POLLOUT)
    ev = dict(p.poll(0)).get(fd, 0)
    return ("R" if ev & select.POLLIN else "-") + ("W" if ev & select.POLLOUT else "-")


def test_tcp_transitions_round_by_round_without_a_driver_thread():
    with Net() as net:
        lst = usocket(net.da)
        lst.bind(("0.0.0.0", 7600))
        lst.listen(4)
        lst.setblocking(False)
        cli = usocket(net.db)
        cli.setblocking(False)
        lfd, cfd = lst.fileno(), None
        assert net.da._thread is None  # a manual clock: the test polls, nobody else
        assert state(lfd) == "--"
        assert cli.connect_ex(("198.18.0.1", 7600)) == errno.EINPROGRESS
        cfd = cli.fileno()
        assert net.db._thread is None
        assert state(cfd) == "--"  # SYN-SENT: neither
        assert net.run(until=lambda: state(cfd) == "-W")
        assert net.run(until=lambda: state(lfd) == "R-")
        srv, _ = lst.accept()
        assert state(lfd) == "--"  # accept took the only one: at once, no round needed
        sfd = srv.fileno()
        assert state(sfd) == "-W"
        cli.send(b"ping")
        assert net.run(until=lambda: state(sfd) == "RW")
        assert srv.recv(10) == b"ping" and state(sfd) == "-W"  # the read cleared it at once
        srv.shutdown(std.SHUT_WR)
        assert net.run(until=lambda: state(cfd) == "RW")  # EOF
        assert cli.recv(10) == b"" and state(cfd) == "RW"  # EOF stays readable
        for s in (cli, srv, lst):
            s.close()
        assert net.da._thread is None and net.db._thread is None


def test_write_readiness_needs_room_for_half_of_what_is_queued_like_linux():
    with Net() as net:
        lst = usocket(net.da)
        lst.bind(("0.0.0.0", 7601))
        lst.listen(1)
        lst.setblocking(False)
        cli = usocket(net.db)
        cli.setblocking(False)
        cli.connect_ex(("198.18.0.1", 7601))
        cfd = cli.fileno()
        assert net.run(until=lambda: state(cfd) == "-W")
        sndbuf = cli.connection.sender.sndbuf
        # nothing moves until the test runs the network: what we send stays queued, unacknowledged
        cli.send(b"x" * (sndbuf.capacity * 3 // 5))
        assert sndbuf.free >= sndbuf.capacity // 3 and cli.connection.writable
        assert state(cfd) == "-W"  # free 2/5 >= queued/2 (3/10)
        cli.send(b"y" * (sndbuf.capacity // 10))
        assert sndbuf.free > 0 and cli.connection.writable  # send() would still take bytes...
        assert state(cfd) == "--"  # ...but free 3/10 < queued/2 (7/20): not writable, as Linux says
        assert net.run(until=lambda: state(cfd) == "-W")  # acknowledged: room again
        srv, _ = lst.accept()
        for s in (cli, srv, lst):
            s.close()
