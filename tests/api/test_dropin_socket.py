"""Drop-in details found by CPython's test_socket (tools/cpython_suites.py): each a stdlib behaviour on the pipe."""

from __future__ import annotations

import errno
import gc
import os
import select
import socket as std
import sys

import pytest

import ustack
from ustack.api.socket import socket as usocket

from .test_socket_calls import pair, udp_pair
from .conftest import A


def fd_is(fd: int, ino: int) -> bool:
    """Whether ``fd`` is still open on the same file (the number alone may be reused by then)."""
    try:
        return os.fstat(fd).st_ino == ino
    except OSError:
        return False


@pytest.fixture
def patched(net):
    da, db = net
    cls = ustack.patch(db)
    try:
        yield da, db, cls
    finally:
        ustack.unpatch()


def test_recvmsg_into_a_read_only_buffer_is_refused_before_the_datagram_is_taken(net):
    u1, u2 = udp_pair(*net, 7401)
    try:
        u2.sendto(b"datagram", (A, 7401))
        buf = bytearray(8)
        for bad in ([b"read-only"], [buf, object()], [memoryview(bytearray(16))[::2]]):
            with pytest.raises(TypeError, match="read-write buffers"):
                u1.recvmsg_into(bad)
        assert u1.recvmsg_into([buf])[0] == 8 and buf == b"datagram"  # still queued
    finally:
        u1.close()
        u2.close()


def test_recvmsg_into_a_read_only_buffer_leaves_the_stream_bytes(net):
    cli, srv = pair(*net, 7402)
    try:
        cli.sendall(b"stream bytes")
        with pytest.raises(TypeError):
            srv.recvmsg_into([bytearray(4), b"read-only"])
        a, b = bytearray(6), bytearray(6)
        assert srv.recvmsg_into([a, b])[0] == 12 and a + b == b"stream bytes"
    finally:
        cli.close()
        srv.close()


def test_sendmsg_checks_buffers_and_ancillary_items_before_sending_anything(net):
    cli, srv = pair(*net, 7403)
    try:
        for args in ((b"not in an iterable",), ([b"x", object()],), ([b"x"], object()), ([b"x"], [(0, 0)]),
                     ([b"x"], [(object(), 0, b"")]), ([b"x"], [(0, 0, object())]), ([b"x"], [], object())):
            with pytest.raises(TypeError):
                cli.sendmsg(*args)
        assert cli.sendmsg([b"ok"], (o for o in [])) == 2  # an empty generator of items is no ancillary data
        with pytest.raises(OSError) as e:
            cli.sendmsg([b"no"], [(std.SOL_SOCKET, std.SCM_RIGHTS, b"\0" * 4)])
        assert e.value.errno == errno.EOPNOTSUPP
        cli.sendall(b"!")
        assert srv.recv(3, std.MSG_WAITALL) == b"ok!"  # nothing of the refused calls went out
    finally:
        cli.close()
        srv.close()


def test_udp_sendmsg_bad_args_send_nothing(net):
    u1, u2 = udp_pair(*net, 7404)
    try:
        with pytest.raises(TypeError):
            u2.sendmsg([b"x"], [(0, 0)], 0, (A, 7404))
        with pytest.raises(TypeError, match="a bytes-like object is required, not 'str'"):
            u2.sendto("text", (A, 7404))
        with pytest.raises(TypeError, match="not NoneType"):
            u2.sendto(b"x", None)
        with pytest.raises(TypeError, match=r"\(1 given\)"):
            u2.sendto(b"x")
        u2.sendmsg([b"da", b"ta"], [], 0, (A, 7404))
        assert u1.recvfrom(10)[0] == b"data"
    finally:
        u1.close()
        u2.close()


def test_listen_and_shutdown_take_a_c_int(net):
    cli, srv = pair(*net, 7405)
    lst = usocket(net[0])
    try:
        with pytest.raises(OverflowError):
            lst.listen(2 ** 31)
        with pytest.raises(OverflowError):
            srv.shutdown(2 ** 31)
        with pytest.raises(TypeError):
            srv.shutdown(1.0)
    finally:
        lst.close()
        cli.close()
        srv.close()


def test_the_readiness_fd_is_blocking_exactly_when_the_timeout_is_none(net):
    s = usocket(net[1])
    try:
        s.settimeout(None)
        fd = s.fileno()
        assert os.get_blocking(fd)
        s.settimeout(2.0)
        assert not os.get_blocking(fd)  # as a kernel socket with a timeout: O_NONBLOCK inside
        s.setblocking(True)
        assert os.get_blocking(fd)
        s.setblocking(False)
        assert not os.get_blocking(fd)
    finally:
        s.close()
    u1, u2 = udp_pair(*net, 7406)
    try:  # the stack side still never blocks on a blocking fd: readiness comes and goes
        u1.settimeout(None)
        fd = u1.fileno()
        assert os.get_blocking(fd)
        u2.sendto(b"x", (A, 7406))
        assert select.select([fd], [], [], 5)[0] == [fd]
        assert u1.recv(1) == b"x"
        assert select.select([fd], [], [], 0)[0] == []
    finally:
        u1.close()
        u2.close()


def test_detach_then_socket_from_the_fd_carries_the_connection_on(patched):
    da, db, cls = patched
    lst = usocket(da)
    lst.bind((A, 7407))
    lst.listen(2)
    lst.settimeout(5)
    try:
        c = std.create_connection((A, 7407), timeout=5)
        conn, _ = lst.accept()
        fd = c.fileno()
        ino = os.fstat(fd).st_ino
        assert c.detach() == fd and c._closed
        with pytest.raises(OSError):
            c.recv(1)
        again = std.socket(std.AF_INET, std.SOCK_STREAM, fileno=fd)
        assert type(again) is cls and again.fileno() == fd and again.family == std.AF_INET
        conn.sendall(b"after detach")
        again.settimeout(5)
        assert again.recv(100) == b"after detach"
        dup = std.fromfd(again.fileno(), std.AF_INET, std.SOCK_STREAM)  # os.dup + socket(fileno=)
        assert dup.fileno() != fd
        conn.sendall(b"via fromfd")
        dup.settimeout(5)
        assert dup.recv(100) == b"via fromfd"
        dup.close()
        again.close()  # the last one: the connection closes (FIN)
        assert conn.recv(10) == b""
        assert not fd_is(fd, ino)  # the readiness fd went with it
    finally:
        conn.close()
        lst.close()


def test_repr_has_the_stdlib_shape_and_an_unclosed_socket_warns_with_it(patched):
    s = std.socket(std.AF_INET, std.SOCK_DGRAM)
    r = repr(s)
    assert "family=%s" % std.AF_INET in r and "type=%s" % std.SOCK_DGRAM in r and "proto=0" in r
    s.bind(("0.0.0.0", 7408))
    assert str(s.getsockname()) in repr(s) and "raddr" not in repr(s)
    r = repr(s)
    with pytest.warns(ResourceWarning) as w:
        s = None
        gc.collect()
    assert any(r in str(x.message) for x in w)
    fresh = std.socket()
    with pytest.warns(ResourceWarning):  # never decided, never closed: the stdlib warns too
        fresh = None
        gc.collect()
    t = std.socket(std.AF_INET, std.SOCK_STREAM)
    t.close()
    assert "[closed]" in repr(t) and "laddr" not in repr(t)


def test_sendfile_reads_a_regular_file_straight_into_the_send_buffer(net, tmp_path):
    import io
    data = bytes(range(256)) * 2000  # 512,000 bytes: several reservations
    path = tmp_path / "f"
    path.write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    cli, srv = pair(*net, 7409)
    try:
        with open(path, "rb") as f:
            assert cli.sendfile_direct(f, offset=1000, count=300_000) == 300_000
            assert f.tell() == 301_000
            assert cli.sendfile_direct(f, offset=500_000) == 12_000 and f.tell() == len(data)
        with open(tmp_path / "empty", "rb") as f:
            assert cli.sendfile_direct(f) == 0
        with pytest.raises(std._GiveupOnSendfile):
            cli.sendfile_direct(io.BytesIO(b"not a file"))
        assert cli.sendfile(io.BytesIO(b"copied")) == 6  # sendfile() falls back to send
        cli.shutdown(std.SHUT_WR)
        got = bytearray()
        while True:
            chunk = srv.recv(65536)
            if not chunk:
                break
            got += chunk
        assert bytes(got) == data[1000:301_000] + data[500_000:] + b"copied"
        cli.setblocking(False)
        with open(path, "rb") as f, pytest.raises(ValueError):
            cli.sendfile_direct(f)
    finally:
        cli.close()
        srv.close()


def test_the_stdlib_sendfile_step_on_a_patched_socket_does_not_touch_the_readiness_fd(patched, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"data")
    with std.socket(std.AF_INET, std.SOCK_STREAM) as s, open(path, "rb") as f:
        s.bind(("0.0.0.0", 7412))
        with pytest.raises(OSError) as e:  # unconnected: ENOTCONN, nothing written into the readiness fd
            s._sendfile_use_sendfile(f)
        assert e.value.errno == errno.ENOTCONN
        with pytest.raises(OverflowError):
            s._sendfile_use_sendfile(type("F", (), {"fileno": lambda self: 2 ** 1000})())


def test_nonblock_type_flag_before_the_decision(patched):
    s = std.socket(std.AF_INET, std.SOCK_STREAM | std.SOCK_NONBLOCK)
    try:
        assert s.gettimeout() == 0.0 and not s.getblocking()
    finally:
        s.close()


def test_getnameinfo_type_error_keeps_no_reference(patched):
    name = "some unique string object %d" % id(object())
    before = sys.getrefcount(name)
    try:
        std.getnameinfo(name, 0)
    except TypeError:
        assert sys.getrefcount(name) == before
    else:
        pytest.fail("getnameinfo took a str")


def test_two_objects_over_one_fd_number_close_it_once(patched):
    s = std.socket(std.AF_INET, std.SOCK_DGRAM)
    s.bind(("0.0.0.0", 7410))
    other = std.socket(fileno=s.fileno())  # the same number, no dup: the kernel's two objects over one fd
    assert type(other) is type(s) and other.type == std.SOCK_DGRAM and other.fileno() == s.fileno()
    other.close()  # closes the number: the socket is gone (its port is free again)
    with pytest.raises(OSError) as e:
        s.close()
    assert e.value.errno == errno.EBADF
    again = std.socket(std.AF_INET, std.SOCK_DGRAM)
    again.bind(("0.0.0.0", 7410))
    fd = again.fileno()
    twin = std.socket(fileno=fd)
    assert again.detach() == fd  # the twin keeps the number ...
    ino = os.fstat(fd).st_ino
    twin.close()  # ... and closing it ends the socket
    assert not fd_is(fd, ino)
    third = std.socket(std.AF_INET, std.SOCK_DGRAM)
    third.bind(("0.0.0.0", 7410))  # the port was released
    third.close()


def test_a_kernel_fd_keeps_the_family_the_kernel_reports(patched, tmp_path):
    u = std.socket(std.AF_UNIX, std.SOCK_STREAM)
    u.bind(str(tmp_path / "s"))
    again = std.socket(fileno=u.fileno())
    try:
        assert again.family == std.AF_UNIX and again.type == std.SOCK_STREAM
    finally:
        u.detach()
        again.close()


def test_a_refused_fileno_leaves_nothing_to_finalize(patched):
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for bad in (1.0, -1, "x"):
            with pytest.raises((TypeError, ValueError, OSError)):
                std.socket(fileno=bad)
        gc.collect()
    unraisable = []
    old, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        with pytest.raises(TypeError):
            std.socket(fileno=2.0)
        gc.collect()
    finally:
        sys.unraisablehook = old
    assert unraisable == [] and not [x for x in w if x.category is ResourceWarning]


def test_a_custom_sslsocket_class_does_not_get_a_readiness_fd(patched):
    import ssl
    from ustack.api.tls import TlsSocket

    class MySSLSocket(ssl.SSLSocket):
        def version(self):
            return ("mine", super().version())

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.sslsocket_class = MySSLSocket
    s = std.socket()
    s.bind(("0.0.0.0", 7411))  # a ustack socket: OpenSSL must not be handed its readiness fd
    s.settimeout(5)  # (were it handed over, the handshake on it would time out rather than hang)
    with ctx.wrap_socket(s, server_side=True) as tls:  # (unconnected: no handshake to wait for)
        assert isinstance(tls, TlsSocket) and isinstance(tls, MySSLSocket)
        assert tls.version() == ("mine", None)  # its override first, then ustack's TLS socket beneath
    kernel = std.socket(std.AF_UNIX, std.SOCK_STREAM)
    with ctx.wrap_socket(kernel, server_side=True) as tls:
        assert isinstance(tls, MySSLSocket)


def test_unwrap_leaves_the_clear_text_after_close_notify_in_the_socket(net, certificate):
    """ENDTLS: the peer's close_notify and its next clear-text bytes arrive together; the TLS side must not
    swallow the clear text (test_ssl's test_starttls hung on it under load)."""
    import ssl
    import threading
    from ustack.api.tls import TlsSocket

    cert, key = certificate
    cli, srv = pair(*net, 7413)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname, client_ctx.verify_mode = False, ssl.CERT_NONE
    result = {}

    def server():
        try:
            tls = TlsSocket(srv, server_ctx, server_side=True)
            assert tls.recv(6) == b"ENDTLS"
            plain = tls.unwrap()
            assert plain is tls and plain.version() is None  # SSLSocket.unwrap returns itself, clear text now
            result["clear"] = plain.recv(100)
            plain.sendall(b"clear answer")
            try:
                plain.unwrap()
            except ValueError:
                result["unwrap again"] = "ValueError"
        except BaseException as e:  # noqa: BLE001 - reported below
            result["error"] = e
    t = threading.Thread(target=server)
    t.start()
    try:
        tls = TlsSocket(cli, client_ctx, server_hostname=A)
        tls.write(b"ENDTLS")
        with pytest.raises(ssl.SSLWantReadError):
            tls._sslobj.shutdown()  # close_notify written; the peer's not read yet
        cli.sendall(tls._outgoing.read() + b"clear text")  # close_notify and the clear text in one send
        t.join(10)
        assert not t.is_alive() and "error" not in result, result
        assert result["clear"] == b"clear text" and result["unwrap again"] == "ValueError"
        assert tls.unwrap() is tls  # reads the server's records up to its close_notify, and no further
        assert cli.recv(12, std.MSG_WAITALL) == b"clear answer"
    finally:
        cli.close()
        srv.close()
        t.join(10)


def test_wrap_socket_through_a_forwarding_wrapper_takes_the_socket_itself_over(patched):
    """asyncio's test servers pass ``wrap_socket`` an object forwarding attributes to the socket: the real
    socket must be left closed (fd -1) as SSLSocket's detach() leaves it, not the wrapper."""
    import ssl
    from ustack.api.tls import TlsSocket
    da, db, cls = patched

    class Forwarding:
        def __init__(self, sock):
            self.__sock = sock

        def __getattr__(self, name):
            return getattr(self.__sock, name)

    lst = usocket(da)
    lst.bind((A, 7414))
    lst.listen(1)
    lst.settimeout(5)
    real = std.create_connection((A, 7414), timeout=5)
    srv, _ = lst.accept()
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        tls = ctx.wrap_socket(Forwarding(real), server_hostname=A, do_handshake_on_connect=False)
        assert isinstance(tls, TlsSocket)
        assert real.fileno() == -1
        real.close()  # the caller's object: closing it must not end the connection the TLS socket holds
        with pytest.raises(BlockingIOError):
            srv.recv(1, std.MSG_DONTWAIT)  # no FIN came
        tls.close()
        srv.settimeout(5)
        assert srv.recv(1) == b""  # the TLS socket's close is the one that ends it
    finally:
        srv.close()
        lst.close()


def test_a_tls_socket_has_its_tls_object_from_connect_to_close(net, certificate):
    """As SSLSocket: no TLS object while unconnected (getpeercert ENOTCONN, version None), one once
    connected, none after close (read and write ValueError); the host name kept IDNA-encoded."""
    import ssl
    import threading
    from ustack.api.tls import TlsSocket

    cert, key = certificate
    da, db = net
    lst = usocket(da)
    lst.bind((A, 7415))
    lst.listen(1)
    lst.settimeout(5)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)

    def server():
        conn, _ = lst.accept()
        conn.settimeout(5)
        try:
            tls = TlsSocket(conn, server_ctx, server_side=True)
            tls.sendall(tls.recv(10))
            tls.close()
        except OSError:
            conn.close()
    t = threading.Thread(target=server)
    t.start()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    s = usocket(db)
    s.settimeout(5)
    tls = TlsSocket(s, ctx, server_hostname="könig.example")
    try:
        assert tls._sslobj is None and tls.version() is None and tls.session_reused is None
        assert tls.server_hostname == "xn--knig-5qa.example"
        with pytest.raises(OSError) as e:
            tls.getpeercert()
        assert e.value.errno == errno.ENOTCONN
        tls.connect((A, 7415))
        assert tls._sslobj is not None and tls.version() is not None
        tls.sendall(b"echo")
        assert tls.recv(10) == b"echo"
    finally:
        tls.close()
        t.join(10)
        lst.close()
    assert tls._sslobj is None
    with pytest.raises(ValueError):
        tls.read(10)
    with pytest.raises(ValueError):
        tls.write(b"x")


def test_an_unclosed_tls_socket_warns_with_its_own_repr(patched):
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    tls = ctx.wrap_socket(std.socket(std.AF_INET), server_hostname="x")
    r = repr(tls)
    with pytest.warns(ResourceWarning) as w:
        tls = None
        gc.collect()
    assert any(r in str(x.message) for x in w)


def test_tls_wrap_refuses_datagrams_and_a_server_side_connect(patched):
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    with std.socket(std.AF_INET, std.SOCK_DGRAM) as u:
        u.bind(("0.0.0.0", 7416))
        with pytest.raises(NotImplementedError, match="only stream sockets are supported"):
            ctx.wrap_socket(u)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with server_ctx.wrap_socket(std.socket(), server_side=True) as s:
        with pytest.raises(ValueError, match="can't connect in server-side mode"):
            s.connect((A, 7417))


def test_a_reset_connection_has_no_peer_and_its_bytes_are_refused_by_tls(net):
    """Linux answers getpeername() with ENOTCONN once a RST came; bytes that came before it are refused by
    a TLS wrap (SSLSocket's pre-handshake check), not handed over as if protected."""
    import ssl
    import struct
    from ustack.api.tls import TlsSocket

    cli, srv = pair(*net, 7418)
    try:
        srv.sendall(b"HTTP/1.0 307 Temporary Redirect\r\n\r\n")
        srv.setsockopt(std.SOL_SOCKET, std.SO_LINGER, struct.pack("ii", 1, 0))
        srv.close()  # RST after the bytes
        conn = cli._conn
        net[1].wait_until(lambda: conn.state.name == "CLOSED", 5)
        with pytest.raises(OSError) as e:
            cli.getpeername()
        assert e.value.errno == errno.ENOTCONN
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        with pytest.raises(ssl.SSLError) as e:
            TlsSocket(cli, ctx, server_hostname="x")
        assert "before TLS handshake with data" in e.value.reason
    finally:
        cli.close()
