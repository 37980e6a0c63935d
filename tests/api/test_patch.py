"""``ustack.patch(driver)``: unmodified stdlib code (create_connection, http.client, http.server) on ustack."""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
import urllib.request

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
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy from the environment
        with opener.open(f"http://{A}:8081/via-urllib", timeout=5) as resp:
            assert resp.read() == b"patched /via-urllib"
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



def test_https_client_and_server_unmodified_under_patch(net, certificate):
    """http.server behind SSLContext.wrap_socket, http.client.HTTPSConnection: TLS records over ustack."""
    import ssl

    from ustack.api.tls import TlsSocket

    da, db = net
    cert, key = certificate
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=cert)

    class Hello(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            data = self.rfile.read(int(self.headers["Content-Length"]))
            body = data[::-1]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    ustack.patch(da)
    try:
        server = http.server.ThreadingHTTPServer((A, 8443), Hello)
        server.socket = server_ctx.wrap_socket(server.socket, server_side=True)  # the stdlib recipe
    finally:
        ustack.unpatch()
    assert isinstance(server.socket, TlsSocket)
    assert ssl.SSLContext.sslsocket_class is ssl.SSLSocket  # unpatch put it back
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    payload = bytes(range(256)) * 300
    ustack.patch(db)
    try:
        c = http.client.HTTPSConnection(A, 8443, timeout=5, context=client_ctx)
        c.request("POST", "/reverse", body=payload)
        assert isinstance(c.sock, TlsSocket) and c.sock._sock._u is not None  # TLS records over ustack
        assert c.sock.version() in ("TLSv1.2", "TLSv1.3")
        assert c.sock.getpeercert()["subjectAltName"] == (("IP Address", A),)
        r = c.getresponse()
        assert (r.status, r.read()) == (200, payload[::-1])
        c.close()
    finally:
        ustack.unpatch()
        server.shutdown()
        thread.join(5)
        server.server_close()


def test_tls_certificate_check_fails_as_with_kernel_sockets(patched, certificate):
    import ssl

    da, db, cls = patched
    cert, key = certificate
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    from ustack.api.socket import socket as usocket

    lst = usocket(da)
    lst.bind((A, 7502))
    lst.listen(1)
    lst.settimeout(5)
    done = threading.Event()

    def serve():
        conn, _ = lst.accept()
        try:
            server_ctx.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            pass  # the client gives up on our certificate
        finally:
            conn.close()
            done.set()

    t = threading.Thread(target=serve)
    t.start()
    try:
        s = socket.create_connection((A, 7502), timeout=5)
        with pytest.raises(ssl.SSLCertVerificationError):
            ssl.create_default_context().wrap_socket(s, server_hostname=A)  # no CA for it: refused
        s.close()
        assert done.wait(5)
    finally:
        t.join(5)
        lst.close()


def test_ipv6_options_on_an_undecided_inet_socket_fail_at_once_as_on_linux(patched):
    """http.server's dual-stack bind tries IPV6_V6ONLY first; Linux refuses it on AF_INET at the call."""
    import errno

    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(OSError) as e:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        assert e.value.errno == errno.ENOPROTOOPT
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # recorded, replayed at bind
        s.bind(("198.18.0.2", 7600))  # no pending IPv6 option replayed to fail here
        assert s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        assert isinstance(s._u, StreamSocket)
    finally:
        s.close()
    import _socket

    k = _socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # the kernel's own socket, beneath any patch
    try:
        with pytest.raises(OSError) as e:
            k.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # the real kernel agrees
        assert e.value.errno == errno.ENOPROTOOPT
    finally:
        k.close()


def test_patch_is_also_a_context_manager_that_unpatches_however_the_block_ends(net):
    da, db = net
    original, lookup = socket.socket, socket.getaddrinfo
    with ustack.patch(db) as cls:
        assert socket.socket is cls and issubclass(cls, original)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind(("0.0.0.0", 0))
            assert isinstance(s, original) and s._u is not None  # an AF_INET socket on the stack
        finally:
            s.close()
    assert socket.socket is original and socket.getaddrinfo is lookup
    with pytest.raises(ZeroDivisionError):
        with ustack.patch(db):
            1 / 0
    assert socket.socket is original and socket.getaddrinfo is lookup


def test_readiness_fds_reach_the_kernel_directly_while_patched(patched):
    """A socket's readiness fd is a kernel socketpair the stack writes on every transition: under the patch
    it must not be made of the patch's socket objects (each set() then went through the patch's Python
    dispatch: 20% of the driver's busy time serving http.server, issue 30)."""
    import _socket

    from ustack.api.readiness import ReadinessFd

    rfd = ReadinessFd(readable=True)
    try:
        assert type(rfd._a) is _socket.socket and type(rfd._b) is _socket.socket
        assert rfd.readable and socket.socket is not _socket.socket
    finally:
        rfd.close()
