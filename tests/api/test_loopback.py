"""``Session(loopback=True)`` / ``ustack run --loopback``: 127/8, ::1 and "localhost" on an in-process ustack stack."""

from __future__ import annotations

import asyncio
import errno
import http.server
import socket
import ssl
import threading
import urllib.request

import pytest

from ustack.api.aio import EventLoop
from ustack.api.session import Session, settings


@pytest.fixture
def session():
    s = Session("pipe", "198.18.0.2/24", loopback=True).install()
    try:
        yield s
    finally:
        s.close()
    assert socket.socket.__module__ == "socket"


@pytest.fixture
def tls_contexts(certificate):
    """(server context on the throwaway certificate, client context that does not verify it)."""
    cert, key = certificate
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    return server_ctx, client_ctx


def _on_loopback(session, sock):
    return sock._u is not None and sock._u._driver is session.loopback


def test_settings_read_ustack_loopback():
    assert settings({"USTACK_ADDR": "198.18.0.2/24", "USTACK_LOOPBACK": "1"})["loopback"] is True
    assert "loopback" not in settings({"USTACK_ADDR": "198.18.0.2/24", "USTACK_LOOPBACK": "0"})


@pytest.mark.parametrize("family,host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1"),
                                         (socket.AF_INET, "localhost")])
def test_tcp_both_ends_are_ustack_sockets(session, family, host):
    with socket.socket(family) as srv:
        srv.bind((host, 0))
        srv.listen()
        with socket.create_connection(srv.getsockname()[:2], timeout=5) as cli:
            conn, peer = srv.accept()
            with conn:
                assert _on_loopback(session, srv) and _on_loopback(session, cli) and _on_loopback(session, conn)
                assert peer[:2] == cli.getsockname()[:2] and conn.getpeername()[:2] == cli.getsockname()[:2]
                cli.sendall(b"y" * 100_000)
                cli.shutdown(socket.SHUT_WR)
                got = b"".join(iter(lambda: conn.recv(65536), b""))
                assert got == b"y" * 100_000
    main = session.stack  # nothing of it on the main stack's wire
    assert main.stats["ipv4.packets_sent"] == main.stats["ipv6.packets_sent"] == 0 and not main.tcp.connections


def test_closed_ports_refuse_tcp_and_udp(session):
    with socket.socket() as s:
        s.settimeout(5)
        with pytest.raises(ConnectionRefusedError):
            s.connect(("127.0.0.1", 9))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.settimeout(5)
        u.connect(("127.0.0.1", 9))
        u.send(b"x")
        with pytest.raises(ConnectionRefusedError):
            u.recv(10)
    assert session.loopback.stack.stats.drops()["udp.no_socket"] == 1


def test_http_server_and_urllib_over_localhost(session):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://localhost:{srv.server_port}/", timeout=5)
        assert e.value.code == 501  # BaseHTTPRequestHandler has no do_GET: the server really answered
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def test_native_asyncio_loop_polls_the_loopback_stack_too(session):
    async def main():
        assert isinstance(asyncio.get_running_loop(), EventLoop)

        async def echo(r, w):
            w.write(await r.readexactly(5))
            await w.drain()
            w.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"hello")
        data = await asyncio.wait_for(r.read(), 5)
        w.close()
        await w.wait_closed()
        server.close()
        await server.wait_closed()
        return data

    assert asyncio.run(main()) == b"hello"


def test_makefile_before_connect_and_close_before_the_file(session):
    with socket.socket() as srv:
        srv.bind(("localhost", 0))
        srv.listen()
        s = socket.socket()
        s.settimeout(5)
        reader = s.makefile("rb")  # before any address: the decision waits for connect
        s.connect(srv.getsockname())
        assert _on_loopback(session, s)
        conn, _ = srv.accept()
        with conn:
            conn.sendall(b"line one\nrest")
            s.close()  # the file keeps the socket open, as the stdlib's
            assert reader.readline() == b"line one\n"
            conn.shutdown(socket.SHUT_WR)
            assert reader.read() == b"rest"
        reader.close()
        assert s._u._dead  # the last file closed it


def test_bad_port_is_refused_before_the_name_is_looked_up(session):
    with socket.socket() as s:
        with pytest.raises(OverflowError):
            s.bind(("localhost", -1))


def test_a_forked_child_gets_ebadf_and_leaves_the_parents_stack_alone(session):
    import os

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.bind(("127.0.0.1", 0))
        pid = os.fork()
        if pid == 0:  # the child: every call fails at once, close does nothing
            code = 1
            try:
                u.sendto(b"x", u.getsockname())
            except OSError as e:
                code = 0 if e.errno == 9 else 2
            u.close()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        u.sendto(b"still mine", u.getsockname())
        u.settimeout(5)
        assert u.recv(100) == b"still mine"


def test_wildcard_bind_waits_for_the_address_that_picks_the_stack(session):
    with socket.socket() as srv, socket.socket() as cli, socket.socket() as server_on_wire:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        cli.settimeout(5)
        cli.bind(("", 0))  # a client's source: the wildcard
        cli.connect(srv.getsockname())
        assert _on_loopback(session, cli) and cli.getsockname()[0] == "127.0.0.1"
        server_on_wire.bind(("0.0.0.0", 0))
        server_on_wire.listen()  # no address came: the main stack
        assert server_on_wire._u._driver is session.driver
        srv.accept()[0].close()


def test_fileno_before_bind_is_the_fd_selectors_keep(session):
    import selectors

    with socket.socket() as srv, selectors.DefaultSelector() as sel:
        srv.setblocking(False)
        fd = srv.fileno()  # asyncore and asyncio register a socket before it has an address
        sel.register(srv, selectors.EVENT_READ)
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        assert srv.fileno() == fd and _on_loopback(session, srv)
        assert sel.select(0) == []
        with socket.create_connection(srv.getsockname(), timeout=5):
            assert [k.fd for k, _ in sel.select(5)] == [fd]
            srv.accept()[0].close()


def test_so_oobinline_is_accepted_and_read_back(session):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert s.getsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE) == 0
        s.setsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE, 1)  # ftplib's test server sets it
        assert s.getsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE) == 1


def test_getsockopt_before_bind_does_not_pick_the_stack(session):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        assert s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
        assert s._u is None
        s.bind(("localhost", 0))
        assert _on_loopback(session, s)


def test_wrap_socket_detaches_the_socket_it_wraps(session, tls_contexts):
    server_ctx, client_ctx = tls_contexts
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        raw = socket.create_connection(srv.getsockname(), timeout=5)
        conn, _ = srv.accept()
        conn.settimeout(5)
        result = []
        t = threading.Thread(target=lambda: result.append(server_ctx.wrap_socket(conn, server_side=True).recv(10)))
        t.start()
        tls = client_ctx.wrap_socket(raw)
        assert raw.fileno() == -1 and isinstance(tls, ssl.SSLSocket)  # as the stdlib leaves them
        raw.close()  # (asyncio's test helpers do this) ends nothing
        tls.sendall(b"over tls")
        t.join(5)
        assert result == [b"over tls"]
        tls.close()


def test_wildcard_loopback_is_still_accepted_and_a_wildcard_server_is_on_both_stacks():
    s = Session("pipe", "198.18.0.2/24", loopback=True)
    s.driver.start()
    from ustack.api.patch import patch, unpatch

    patch(s.driver, loopback=s.loopback, wildcard="loopback")
    try:
        with socket.create_server(("", 0)) as srv:  # ftplib's active-mode data listener
            with socket.create_connection(("127.0.0.1", srv.getsockname()[1]), timeout=5):
                srv.accept()[0].close()
            assert srv._u._driver is s.driver and srv._u._twin._driver is s.loopback  # (ustack.api.wildcard)
    finally:
        unpatch()
        s.close()
    with pytest.raises(ValueError):
        patch(s.driver, wildcard="everywhere")


def test_wrap_socket_before_connect(session, tls_contexts):
    server_ctx, client_ctx = tls_contexts
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        result = []

        def serve():
            conn, _ = srv.accept()
            conn.settimeout(5)
            with server_ctx.wrap_socket(conn, server_side=True) as tls_conn:
                result.append(tls_conn.recv(10))

        t = threading.Thread(target=serve)
        t.start()
        raw = socket.socket()
        tls = client_ctx.wrap_socket(raw)  # asyncio's test_connect_accepted_socket does this
        assert raw.fileno() == -1
        tls.settimeout(5)
        tls.connect(srv.getsockname())
        assert tls._sock._u._driver is session.loopback
        tls.sendall(b"early")
        t.join(5)
        tls.close()
        assert result == [b"early"]


def test_tls_nonblocking_send_raises_want_write_when_full_and_loses_nothing(session, tls_contexts):
    server_ctx, client_ctx = tls_contexts
    server_ctx.num_tickets = 0  # nothing for the client to leave unread (its close would then be a RST)
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        tls = client_ctx.wrap_socket(socket.socket())
        got = []
        go = threading.Event()

        def serve():
            conn, _ = srv.accept()
            conn.settimeout(10)
            with server_ctx.wrap_socket(conn, server_side=True) as s:
                go.wait(10)
                got.append(b"".join(iter(lambda: s.recv(65536), b"")))

        t = threading.Thread(target=serve)
        t.start()
        tls.settimeout(5)
        tls.connect(srv.getsockname())
        tls.setblocking(False)
        sent = 0
        with pytest.raises(ssl.SSLWantWriteError):
            for _ in range(10_000):  # the peer does not read: the send buffer fills
                sent += tls.send(bytes([sent % 251]) * 8192)
        go.set()
        tls.setblocking(True)
        tls.settimeout(5)
        tls.close()
        t.join(10)
        assert len(got[0]) == sent and got[0] == b"".join(bytes([i * 8192 % 251]) * 8192 for i in range(sent // 8192))


def test_the_loopback_stack_owns_all_of_127_slash_8_for_tcp(session):
    # Linux's lo: any 127.x.y.z is bindable and connectable; an unbound client's source is 127.0.0.1 (the
    # local route's src), the accepted socket's local address the one the client asked for
    with socket.socket() as srv, socket.socket() as cli, socket.socket() as bound_cli:
        srv.bind(("127.3.4.5", 0))
        srv.listen()
        port = srv.getsockname()[1]
        assert srv.getsockname() == ("127.3.4.5", port)
        cli.settimeout(5)
        cli.connect(("127.3.4.5", port))
        conn, peer = srv.accept()
        with conn:
            assert cli.getsockname() == peer and peer[0] == "127.0.0.1"
            assert conn.getsockname() == ("127.3.4.5", port) == cli.getpeername()
            conn.sendall(b"from 127.3.4.5")
            assert cli.recv(100) == b"from 127.3.4.5"
        bound_cli.bind(("127.0.0.2", 0))
        bound_cli.settimeout(5)
        bound_cli.connect(("127.3.4.5", port))
        conn, peer = srv.accept()
        with conn:
            assert peer == bound_cli.getsockname() and peer[0] == "127.0.0.2"
        with socket.socket() as nobody:
            nobody.settimeout(5)
            with pytest.raises(ConnectionRefusedError):
                nobody.connect(("127.200.0.1", port))  # local, no listener there: RST from 127.200.0.1
    assert _on_loopback(session, srv) and not session.stack.tcp.connections


def test_the_loopback_stack_owns_all_of_127_slash_8_for_udp(session):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as c:
        a.bind(("127.0.0.2", 0))
        b.bind(("127.8.0.1", 0))
        a.settimeout(5)
        b.settimeout(5)
        a.sendto(b"to 127.8.0.1", b.getsockname())
        assert b.recvfrom(100) == (b"to 127.8.0.1", a.getsockname())
        b.sendto(b"to 127.0.0.2", a.getsockname())
        assert a.recvfrom(100) == (b"to 127.0.0.2", b.getsockname())
        c.connect(b.getsockname())  # unbound, connected: the source is 127.0.0.1, as Linux's getsockname says
        assert c.getsockname() == ("127.0.0.1", c.getsockname()[1])
        c.send(b"connected")
        assert b.recvfrom(100) == (b"connected", c.getsockname())
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as d:
            d.settimeout(5)
            d.connect(("127.66.0.1", 9))
            d.send(b"nobody")
            with pytest.raises(ConnectionRefusedError):  # port unreachable from 127.66.0.1
                d.recv(10)
        with pytest.raises(OSError) as e:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).bind(("198.18.0.77", 0))
        assert e.value.errno == errno.EADDRNOTAVAIL  # (the main stack's own subnet is not all ours)


def test_a_tls_handshake_failure_sends_its_alert_before_raising(session, tls_contexts):
    # test_ssl's SNI-callback cases: the server's failed handshake must put its alert on the wire, so the
    # client reads the reason (a kernel SSLSocket's OpenSSL has written it to the fd before raising)
    server_ctx, client_ctx = tls_contexts
    server_ctx.sni_callback = lambda sslobj, name, ctx: ssl.ALERT_DESCRIPTION_ACCESS_DENIED
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        failures = []

        def serve():
            conn, _ = srv.accept()
            conn.settimeout(5)
            try:
                server_ctx.wrap_socket(conn, server_side=True)
            except ssl.SSLError as e:
                failures.append(e.reason)
            finally:
                conn.close()

        t = threading.Thread(target=serve)
        t.start()
        with socket.create_connection(srv.getsockname(), timeout=5) as raw:
            with pytest.raises(ssl.SSLError) as e:
                client_ctx.wrap_socket(raw, server_hostname="ustack.test")
        t.join(5)
        assert e.value.reason == "TLSV1_ALERT_ACCESS_DENIED" and failures


def test_connect_ex_raises_a_name_that_does_not_resolve(session, tls_contexts, monkeypatch):
    # the stdlib's connect_ex returns connect(2)'s errno but raises gaierror (test_ssl's transient_internet
    # turns that into a skip; a returned -3 failed test_timeout_connect_ex instead)
    def no_such_name(*args, **kw):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket.socket._resolver, "getaddrinfo", no_such_name)
    _, client_ctx = tls_contexts
    with socket.socket() as plain, client_ctx.wrap_socket(socket.socket(), do_handshake_on_connect=False) as tls:
        for s in (plain, tls):
            with pytest.raises(socket.gaierror):
                s.connect_ex(("no.such.name.invalid", 443))
    from ustack.api.socket import socket as ustack_socket

    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with ustack_socket(session.driver, socket.AF_INET, kind) as s, pytest.raises(socket.gaierror):
            s.connect_ex(("no.such.name.invalid", 443))
