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
