"""``ustack.patch(driver)``: unmodified stdlib code (create_connection, http.client, http.server) on ustack."""

from __future__ import annotations

import http.client
import http.server
import socket
import threading

import pytest

import ustack
from ustack.api.stream import StreamSocket

from .conftest import A


@pytest.fixture
def patched(net):
    da, db = net
    original = socket.socket
    cls = ustack.patch(db)
    try:
        yield da, db, cls
    finally:
        ustack.unpatch()
    assert socket.socket is original


def test_inet_sockets_are_ustack_and_still_socket_instances(patched):
    da, db, cls = patched
    from ustack.api.socket import socket as usocket

    lst = usocket(da)
    lst.bind((A, 7500))
    lst.listen(2)
    lst.settimeout(5)
    try:
        s = socket.create_connection((A, 7500), timeout=5)  # the stdlib's own function, unmodified
        assert isinstance(s, socket.socket) and type(s) is cls
        assert isinstance(s._u, StreamSocket) and s.gettimeout() == 5
        conn, _ = lst.accept()
        s.sendall(b"via create_connection")
        assert conn.recv(100) == b"via create_connection"
        conn.close()
        s.close()
    finally:
        lst.close()


def test_loopback_and_unix_stay_on_the_kernel(patched):
    kl = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    kl.bind(("127.0.0.1", 0))
    kl.listen(1)
    try:
        c = socket.socket()
        c.settimeout(5)  # recorded, replayed on the kernel socket
        c.connect(kl.getsockname())
        assert c._u is None and c.gettimeout() == 5
        k, _ = kl.accept()
        c.sendall(b"kernel")
        assert k.recv(10) == b"kernel"
        k.close()
        c.close()
        a, b = socket.socketpair()
        assert a.family == socket.AF_UNIX and a._u is None
        a.close()
        b.close()
    finally:
        kl.close()


def test_http_server_and_client_unmodified_under_patch(net):
    da, db = net

    class Hello(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = b"patched " + self.path.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    ustack.patch(da)
    try:
        server = http.server.ThreadingHTTPServer((A, 8081), Hello)  # its own socket.socket(): ustack
    finally:
        ustack.unpatch()
    assert server.socket._u is not None
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    ustack.patch(db)
    try:
        c = http.client.HTTPConnection(A, 8081, timeout=5)
        c.request("GET", "/x")
        r = c.getresponse()
        assert (r.status, r.read()) == (200, b"patched /x")
        c.close()
    finally:
        ustack.unpatch()
        server.shutdown()
        thread.join(5)
        server.server_close()


def test_asyncio_streams_unmodified_under_patch(net):
    """asyncio's selector loop waits on the readiness fds; its transports call recv/send on ustack sockets."""
    import asyncio

    da, db = net
    payload = bytes(range(256)) * 400

    async def main():
        async def handle(reader, writer):
            data = await reader.read()  # until EOF
            writer.write(data[::-1])
            await writer.drain()
            writer.close()

        ustack.patch(da)
        try:
            server = await asyncio.start_server(handle, A, 9300)
        finally:
            ustack.unpatch()
        ustack.patch(db)
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(A, 9300), 5)
        finally:
            ustack.unpatch()
        assert writer.get_extra_info("socket").type == socket.SOCK_STREAM
        writer.write(payload)
        await writer.drain()
        writer.write_eof()
        got = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        server.close()
        await server.wait_closed()
        return got

    assert asyncio.run(main()) == payload[::-1]


def test_tls_on_a_ustack_socket_is_refused_plainly(patched):
    """ssl takes the fd over with detach(); a ustack socket has none to give, so it says so (EOPNOTSUPP)."""
    import errno
    import ssl

    da, db, cls = patched
    from ustack.api.socket import socket as usocket

    lst = usocket(da)
    lst.bind((A, 7501))
    lst.listen(1)
    try:
        s = socket.create_connection((A, 7501), timeout=5)
        with pytest.raises(OSError) as e:
            ssl.create_default_context().wrap_socket(s, server_hostname="example.test")
        assert e.value.errno == errno.EOPNOTSUPP and "TLS" in str(e.value)
        s.sendall(b"still usable")  # the refusal left the socket intact
        s.close()
    finally:
        lst.close()
