"""SO_REUSEPORT with Linux's semantics: listeners that all set it share a port, each with its own queue.

The same scenario runs on kernel sockets (127.0.0.1) and on ustack (two
stacks over the pipe): two listeners share a port, connections spread over
both, a listener without the option cannot join, and a member that closes
leaves the port to the others. On ustack each connection must land on the
member the group's keyed 4-tuple hash picks (ustack.transport.tcp.reuseport).
"""

from __future__ import annotations

import errno
import selectors
import socket as std

import pytest

from ustack.api.socket import socket as usocket
from ustack.net.addr import parse as ip_addr

from .conftest import A

CONNECTIONS = 24


class Kernel:
    host = "127.0.0.1"

    def server(self):
        return std.socket()

    def client(self):
        return std.socket()


class Ustack:
    host = A

    def __init__(self, da, db):
        self.da, self.db = da, db

    def server(self):
        return usocket(self.da)

    def client(self):
        return usocket(self.db)


def reuseport_listener(side, port):
    s = side.server()
    s.setsockopt(std.SOL_SOCKET, std.SO_REUSEPORT, 1)
    s.bind((side.host, port))
    s.listen(CONNECTIONS)
    return s


def accept_all(listeners, count, timeout=10.0):
    """Accept ``count`` connections from whichever listener has one; {listener index: [accepted socket]}."""
    sel = selectors.DefaultSelector()
    for i, lst in enumerate(listeners):
        lst.setblocking(False)
        sel.register(lst, selectors.EVENT_READ, i)
    got = {i: [] for i in range(len(listeners))}
    try:
        while sum(map(len, got.values())) < count:
            ready = sel.select(timeout)
            assert ready, f"only {sum(map(len, got.values()))} of {count} connections arrived"
            for key, _ in ready:
                try:
                    conn, _ = key.fileobj.accept()
                except BlockingIOError:
                    continue
                got[key.data].append(conn)
    finally:
        sel.close()
    return got


def scenario(side):
    socks = []
    try:
        first = reuseport_listener(side, 0)
        port = first.getsockname()[1]
        second = reuseport_listener(side, port)
        socks += [first, second]
        assert second.getsockopt(std.SOL_SOCKET, std.SO_REUSEPORT) == 1

        plain = side.server()  # without SO_REUSEPORT it cannot join
        socks.append(plain)
        with pytest.raises(OSError) as exc:
            plain.bind((side.host, port))
            plain.listen(1)
        assert exc.value.errno == errno.EADDRINUSE

        clients = []
        for i in range(CONNECTIONS):
            c = side.client()
            c.settimeout(5)
            c.connect((side.host, port))
            c.sendall(b"hello %d" % i)
            clients.append(c)
        socks += clients
        got = accept_all([first, second], CONNECTIONS)
        socks += [c for conns in got.values() for c in conns]
        assert all(got.values()), f"connections did not spread: {[len(v) for v in got.values()]}"
        sent = sorted(b"hello %d" % i for i in range(CONNECTIONS))
        received = []
        for conns in got.values():
            for conn in conns:
                conn.settimeout(5)
                received.append(conn.recv(100))
        assert sorted(received) == sent

        # a member that closes leaves the port to the rest: new connections all go to the other
        second.close()
        late = []
        for _ in range(4):
            c = side.client()
            c.settimeout(5)
            c.connect((side.host, port))
            late.append(c)
        socks += late
        after = accept_all([first], 4)
        socks += after[0]
        return port, {i: [c.getpeername() for c in conns] for i, conns in got.items()}
    finally:
        for s in socks:
            s.close()


def test_reuseport_on_kernel_sockets():
    scenario(Kernel())


def test_reuseport_on_ustack_spreads_by_the_groups_4tuple_hash(net):
    da, db = net
    port, peers = scenario(Ustack(da, db))
    assert not da.stack.tcp.listeners  # the group went with its last member
    # every connection met the member the keyed hash picks for its 4-tuple (the group had 2 members)
    from ustack.transport.tcp.reuseport import ReuseportGroup

    probe = ReuseportGroup(da.stack.tcp, (ip_addr(A), port))
    probe.members = [0, 1]
    for index, names in peers.items():
        for raddr, rport in names:
            assert probe.pick(ip_addr(raddr), rport, ip_addr(A), port) == index


def test_a_member_closing_resets_only_its_own_queue(net):
    """Linux without tcp_migrate_req: connections waiting in a closed member's accept queue are reset."""
    da, db = net
    side = Ustack(da, db)
    first = reuseport_listener(side, 0)
    port = first.getsockname()[1]
    second = reuseport_listener(side, port)
    group = da.stack.tcp.listeners[(ip_addr(A), port)]
    clients = []
    try:
        for _ in range(12):
            c = side.client()
            c.settimeout(5)
            c.connect((side.host, port))
            clients.append(c)
        assert da.wait_until(lambda: sum(m.pending for m in group.members) == 12, 5)
        queued = {id(m): m.pending for m in group.members}
        with da.lock:
            listed = da.stack.snapshot(da.clock())["listeners"]
        assert sorted(entry["accept_queue"] for entry in listed) == sorted(queued.values())  # each member shown
        doomed = group.members[1].pending
        assert doomed and group.members[0].pending, queued
        second.close()
        assert group.members == [first._listener]
        from ustack.transport.tcp.tcb import State

        def reset():
            return [c for c in clients if c._conn.state == State.CLOSED]

        assert db.wait_until(lambda: len(reset()) >= doomed, 5)
        for c in reset():
            with pytest.raises(ConnectionResetError):
                c.recv(1)
        assert len(reset()) == doomed  # the first member's queue is untouched
        assert first._listener.pending == 12 - doomed
    finally:
        for s in clients + [first, second]:
            s.close()


def test_plain_listener_then_reuseport_is_refused(net):
    da, _ = net
    plain = usocket(da)
    plain.bind((A, 0))
    plain.listen(1)
    port = plain.getsockname()[1]
    other = usocket(da)
    other.setsockopt(std.SOL_SOCKET, std.SO_REUSEPORT, 1)
    try:
        with pytest.raises(OSError) as exc:
            other.bind((A, port))
        assert exc.value.errno == errno.EADDRINUSE
    finally:
        plain.close()
        other.close()


def test_several_threads_accepting_on_one_listener_all_get_connections(net):
    """The other way to share a port: one listener, blocking accept() in several threads. A thread woken
    for a connection another thread took waits for the next one (it used to get EBADF)."""
    import threading

    da, db = net
    lst = usocket(da)
    lst.bind((A, 0))
    lst.listen(16)
    port = lst.getsockname()[1]
    accepted, errors = [], []

    def acceptor():
        try:
            while True:
                conn, _ = lst.accept()
                accepted.append(conn)
        except OSError as e:
            errors.append(e.errno)

    threads = [threading.Thread(target=acceptor) for _ in range(4)]
    for t in threads:
        t.start()
    clients = []
    try:
        for _ in range(12):
            c = usocket(db)
            c.settimeout(5)
            c.connect((A, port))
            clients.append(c)
        assert da.wait_until(lambda: len(accepted) == 12, 5), len(accepted)
        assert errors == []
    finally:
        lst.close()  # the acceptors end with EBADF, as a blocked accept() ends on a closed listener
        for t in threads:
            t.join(5)
        for s in clients + accepted:
            s.close()
    assert errors == [errno.EBADF] * 4
