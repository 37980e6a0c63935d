"""A socket bound to the wildcard under ``--loopback`` is on both stacks (``ustack.api.wildcard``), as Linux's
wildcard spans every interface: it accepts and receives over the wire (the main stack) and over 127/8."""

from __future__ import annotations

import asyncio
import errno
import selectors
import socket

import pytest

from ustack.api.aio import EventLoop
from ustack.api.driver import Driver
from ustack.api.session import Session
from ustack.api.socket import socket as ustack_socket
from ustack.stack import Stack

PEER = "198.18.0.1"  # a host on the main stack's wire (the pipe's other end)


@pytest.fixture
def session():
    s = Session("pipe", "198.18.0.2/24", loopback=True).install()
    peer = Driver(Stack(s.link.b, f"{PEER}/24"), s.clock)
    peer.start()
    s.peer = peer
    try:
        yield s
    finally:
        peer.close()
        s.close()
    assert socket.socket.__module__ == "socket"


def _peer_connect(session, port):
    c = ustack_socket(session.peer)
    c.settimeout(5)
    c.connect(("198.18.0.2", port))
    return c


@pytest.mark.parametrize("bind", [True, False])
def test_a_wildcard_listener_accepts_over_the_wire_and_over_loopback(session, bind):
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if bind:
            srv.bind(("0.0.0.0", 0))
        srv.listen()  # (unbound: Linux binds the wildcard and an ephemeral port)
        port = srv.getsockname()[1]
        assert srv.getsockname() == ("0.0.0.0", port)
        assert srv.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1 and srv._u._twin._reuseaddr
        with socket.create_connection(("127.0.0.1", port), timeout=5) as lo_cli, _peer_connect(session, port) as wire:
            accepted = [srv.accept() for _ in range(2)]
            by_peer = {peer: conn for conn, peer in accepted}
            assert set(by_peer) == {lo_cli.getsockname(), wire.getsockname()}
            lo_conn, wire_conn = by_peer[lo_cli.getsockname()], by_peer[wire.getsockname()]
            assert lo_conn.getsockname() == ("127.0.0.1", port) and lo_conn._u._driver is session.loopback
            assert wire_conn.getsockname() == ("198.18.0.2", port) and wire_conn._u._driver is session.driver
            lo_conn.sendall(b"over lo")
            wire_conn.sendall(b"over the wire")
            assert lo_cli.recv(100) == b"over lo" and wire.recv(100) == b"over the wire"
            for conn, _ in accepted:
                conn.close()


def test_readiness_fd_and_nonblocking_accept_see_either_stack(session):
    with socket.create_server(("", 0)) as srv, selectors.DefaultSelector() as sel:
        port = srv.getsockname()[1]
        srv.setblocking(False)
        sel.register(srv, selectors.EVENT_READ)
        with pytest.raises(BlockingIOError):
            srv.accept()
        assert sel.select(0) == []
        for connect in (lambda: socket.create_connection(("127.0.0.1", port), timeout=5),
                        lambda: _peer_connect(session, port)):
            with connect():
                assert [k.fd for k, _ in sel.select(5)] == [srv.fileno()]
                conn, _ = srv.accept()
                conn.close()
            assert sel.select(0) == []  # nothing left on either queue


def test_close_closes_both_and_a_taken_port_is_eaddrinuse(session):
    with socket.socket() as lo_srv:
        lo_srv.bind(("127.0.0.1", 0))
        lo_srv.listen()
        with socket.socket() as wild:  # Linux: a wildcard bind meets the socket on 127.0.0.1 of the port
            with pytest.raises(OSError) as e:
                wild.bind(("", lo_srv.getsockname()[1]))
            assert e.value.errno == errno.EADDRINUSE
    srv = socket.create_server(("", 0))
    port = srv.getsockname()[1]
    srv.close()
    with socket.socket() as c:
        c.settimeout(5)
        with pytest.raises(ConnectionRefusedError):
            c.connect(("127.0.0.1", port))
    c = ustack_socket(session.peer)
    c.settimeout(5)
    with pytest.raises(ConnectionRefusedError):
        c.connect(("198.18.0.2", port))
    c.close()
    assert not session.loopback.stack.tcp.listeners and not session.stack.tcp.listeners


def test_a_client_bound_to_the_wildcard_keeps_the_stack_it_connects_through(session):
    with socket.create_server(("", 0)) as srv:
        port = srv.getsockname()[1]
        with socket.socket() as cli:
            cli.bind(("", 0))
            fd = cli.fileno()
            cli.settimeout(5)
            cli.connect(("127.0.0.1", port))
            assert cli._u._driver is session.loopback and cli.fileno() == fd
            assert cli.getsockname()[0] == "127.0.0.1"
            srv.accept()[0].close()
        peer_srv = ustack_socket(session.peer)
        peer_srv.bind((PEER, 0))
        peer_srv.listen()
        with socket.socket() as cli:
            cli.bind(("0.0.0.0", 0))
            cli.settimeout(5)
            cli.connect(peer_srv.getsockname())
            assert cli._u._driver is session.driver and cli._u._twin is None
            assert cli.getsockname()[0] == "198.18.0.2"
            peer_srv.accept()[0].close()
        peer_srv.close()


def test_a_wildcard_udp_socket_hears_both_stacks_and_answers_through_each(session):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as srv, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as lo_cli:
        srv.bind(("", 0))
        srv.settimeout(5)
        lo_cli.settimeout(5)
        port = srv.getsockname()[1]
        wire = ustack_socket(session.peer, socket.AF_INET, socket.SOCK_DGRAM)
        wire.settimeout(5)
        try:
            lo_cli.sendto(b"from lo", ("127.0.0.1", port))
            wire.sendto(b"from the wire", ("198.18.0.2", port))
            got = dict(srv.recvfrom(100) for _ in range(2))
            # (unconnected senders: getsockname says 0.0.0.0, as Linux; the source was the route's)
            assert got == {b"from lo": ("127.0.0.1", lo_cli.getsockname()[1]),
                           b"from the wire": (PEER, wire.getsockname()[1])}
            for addr in got.values():
                srv.sendto(b"back", addr)
            assert lo_cli.recvfrom(100) == (b"back", ("127.0.0.1", port))
            assert wire.recvfrom(100) == (b"back", ("198.18.0.2", port))
            srv.setblocking(False)
            with pytest.raises(BlockingIOError):
                srv.recvfrom(100)
        finally:
            wire.close()


def test_the_native_asyncio_loop_serves_a_wildcard_server_on_both_stacks(session):
    async def main():
        async def echo(reader, writer):
            writer.write(await reader.readline())
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "0.0.0.0", 0)
        port = server.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"lo\n")
        lo_reply = await r.readline()
        w.close()
        loop = asyncio.get_running_loop()
        wire_reply = await loop.run_in_executor(None, _wire_echo, session, port)
        transport, proto = await loop.create_datagram_endpoint(_Collect, local_addr=("0.0.0.0", 0))
        uport = transport.get_extra_info("sockname")[1]
        await loop.run_in_executor(None, _wire_datagram, session, uport)
        lo_sender, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol,
                                                           remote_addr=("127.0.0.1", uport))
        lo_sender.sendto(b"lo datagram")
        while len(proto.got) < 2:
            await proto.more.wait()
            proto.more.clear()
        lo_sender.close()
        transport.close()
        server.close()
        await server.wait_closed()
        return lo_reply, wire_reply, sorted(proto.got)

    loop = EventLoop(session.driver, session.loopback)
    try:
        result = loop.run_until_complete(asyncio.wait_for(main(), 20))
    finally:
        loop.close()
    assert result == (b"lo\n", b"wire\n", [b"lo datagram", b"wire datagram"])


class _Collect(asyncio.DatagramProtocol):
    def __init__(self):
        self.got = []
        self.more = asyncio.Event()

    def datagram_received(self, data, addr):
        self.got.append(data)
        self.more.set()


def _wire_echo(session, port):
    with _peer_connect(session, port) as c:
        c.sendall(b"wire\n")
        return c.recv(100)


def _wire_datagram(session, port):
    u = ustack_socket(session.peer, socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"wire datagram", ("198.18.0.2", port))
    u.close()


def test_asyncio_stock_loop_dual_stack_server_on_host_none(session):
    # test_asyncio's test_create_server_dual_stack: host=None is 0.0.0.0 and :: (IPv6 from the loopback
    # stack's ::1, the main stack having none); 127.0.0.1 and ::1 both reach it
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    infos = socket.getaddrinfo(None, port, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    assert {i[0] for i in infos} == {socket.AF_INET, socket.AF_INET6}
    loop = asyncio.SelectorEventLoop()
    try:
        server = loop.run_until_complete(loop.create_server(asyncio.Protocol, host=None, port=port))
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            with socket.socket(family) as c:
                c.settimeout(5)
                c.connect((host, port))
        server.close()
        loop.run_until_complete(server.wait_closed())
    finally:
        loop.close()


def test_so_reuseport_wildcard_listeners_share_the_port_on_both_stacks(session):
    with socket.socket() as a, socket.socket() as b, selectors.DefaultSelector() as sel:
        for s in (a, b):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        a.bind(("", 0))
        port = a.getsockname()[1]
        b.bind(("", port))
        for s in (a, b):
            s.listen()
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        assert b.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(4)]
        clients += [_peer_connect(session, port) for _ in range(4)]
        accepted = []
        while len(accepted) < 8:
            ready = sel.select(5)
            assert ready, f"only {len(accepted)} of 8 connections accepted"
            for key, _ in ready:
                try:
                    accepted.append(key.fileobj.accept()[0])
                except BlockingIOError:
                    pass
        assert {c._u._driver for c in accepted} == {session.driver, session.loopback}
        with socket.socket() as c, pytest.raises(OSError) as e:
            c.bind(("", port))  # without SO_REUSEPORT: in use
        assert e.value.errno == errno.EADDRINUSE
        for s in accepted + clients:
            s.close()
