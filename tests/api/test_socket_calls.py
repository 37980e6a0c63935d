"""Stdlib-complete ustack sockets: makefile, dup, detach, flags, msg calls, sendfile, timeouts, GC close."""

from __future__ import annotations

import errno
import gc
import socket as std
import struct
import tempfile
import threading
import time

import pytest

from ustack.api.socket import socket as usocket

from .conftest import A, B


def pair(da, db, port):
    lst = usocket(da)
    lst.bind(("0.0.0.0", port))
    lst.listen(4)
    lst.settimeout(5)
    cli = usocket(db)
    cli.settimeout(5)
    cli.connect((A, port))
    srv, _ = lst.accept()
    srv.settimeout(5)
    lst.close()
    return cli, srv


def udp_pair(da, db, port):
    u1 = usocket(da, std.AF_INET, std.SOCK_DGRAM)
    u1.bind(("0.0.0.0", port))
    u1.settimeout(5)
    u2 = usocket(db, std.AF_INET, std.SOCK_DGRAM)
    u2.settimeout(5)
    return u1, u2


def read_all(sock) -> bytes:
    got = bytearray()
    while True:
        d = sock.recv(65536)
        if not d:
            return bytes(got)
        got += d


def test_family_type_proto_are_the_stdlib_enums_and_timeout_is_an_attribute(net):
    da, db = net
    s = usocket(db, std.AF_INET, std.SOCK_STREAM | std.SOCK_NONBLOCK)
    u = usocket(db, std.AF_INET, std.SOCK_DGRAM)
    try:
        assert s.family is std.AddressFamily.AF_INET and s.type is std.SocketKind.SOCK_STREAM
        assert u.type is std.SocketKind.SOCK_DGRAM and s.proto == 0
        assert s.timeout == 0.0 and s.getblocking() is False
        s.settimeout(2.5)
        assert s.timeout == 2.5
        assert s.getsockopt(std.SOL_SOCKET, std.SO_TYPE) == std.SOCK_STREAM
    finally:
        s.close()
        u.close()


def test_makefile_keeps_the_socket_open_until_the_last_file_closes(net):
    cli, srv = pair(*net, 7301)
    try:
        w = cli.makefile("wb")
        r = cli.makefile("rb")
        cli.close()  # files still open: the connection lives on
        w.write(b"line one\nline two\n")
        w.flush()
        f = srv.makefile("rwb")
        assert f.readline() == b"line one\n" and f.readline() == b"line two\n"
        f.write(b"answer\n")
        f.flush()
        assert r.readline() == b"answer\n"
        w.close()
        assert cli.fileno() >= 0  # one file left
        r.close()  # the last file: now the socket closes, and so does the connection (FIN)
        assert cli.fileno() == -1
        assert f.read() == b""
        f.close()
    finally:
        srv.close()


def test_text_makefile_and_readline_across_segments(net):
    cli, srv = pair(*net, 7302)
    try:
        t = srv.makefile("r", encoding="utf-8", newline="")
        cli.sendall("héllo\r\n".encode() * 3000)
        cli.shutdown(std.SHUT_WR)
        lines = t.readlines()
        assert lines == ["héllo\r\n"] * 3000
        t.close()
    finally:
        cli.close()
        srv.close()


def test_dup_shares_the_connection_until_the_last_copy_closes(net):
    cli, srv = pair(*net, 7303)
    d = cli.dup()
    try:
        assert d.fileno() != cli.fileno() and d.fileno() >= 0
        assert d.getpeername() == cli.getpeername() == (A, 7303)
        cli.close()
        d.sendall(b"from the dup")
        d.shutdown(std.SHUT_WR)
        assert read_all(srv) == b"from the dup"
        srv.sendall(b"back")
        assert d.recv(10) == b"back"
    finally:
        d.close()
        srv.close()
    with pytest.raises(OSError) as e:
        d.send(b"x")
    assert e.value.errno == errno.EBADF


def test_detach_closes_the_object_but_not_the_connection_nor_the_device(net):
    da, db = net
    cli, srv = pair(da, db, 7304)
    try:
        fd = cli.detach()
        assert fd >= 0 and cli.fileno() == -1
        with pytest.raises(OSError) as e:
            cli.recv(1)
        assert e.value.errno == errno.EBADF
        with pytest.raises(BlockingIOError):
            srv.recv(10, std.MSG_DONTWAIT)  # no FIN: the connection is still open
        # the device still works: a new connection on the same stack
        c2, s2 = pair(da, db, 7305)
        c2.sendall(b"ok")
        assert s2.recv(2) == b"ok"
        c2.close()
        s2.close()
    finally:
        srv.close()


def test_recvfrom_sendto_sendmsg_recvmsg_on_tcp(net):
    cli, srv = pair(*net, 7306)
    try:
        assert cli.sendto(b"abc", (A, 7306)) == 3  # the address is ignored, as on Linux
        assert srv.recvfrom(3) == (b"abc", None)
        assert cli.sendmsg([b"12", memoryview(b"345"), bytearray(b"6")]) == 6
        buf = bytearray(6)
        assert srv.recvfrom_into(buf, 6, std.MSG_WAITALL) == (6, None) and buf == b"123456"
        cli.sendall(b"hello world")
        data, anc, flags, address = srv.recvmsg(5, 0, std.MSG_WAITALL)
        assert (data, anc, flags, address) == (b"hello", [], 0, None)
        a, b = bytearray(3), bytearray(10)
        n, anc, flags, address = srv.recvmsg_into([a, b], 0, std.MSG_WAITALL)
        assert n == 6 and bytes(a) == b" wo" and bytes(b[:3]) == b"rld" and anc == []
        with pytest.raises(OSError) as e:
            cli.sendmsg([b"x"], [(std.SOL_SOCKET, std.SCM_RIGHTS, struct.pack("i", 0))])
        assert e.value.errno == errno.EOPNOTSUPP
    finally:
        cli.close()
        srv.close()


def test_flags_peek_dontwait_waitall_and_unknown_flags(net):
    da, db = net
    cli, srv = pair(da, db, 7307)
    try:
        with pytest.raises(BlockingIOError):
            srv.recv(10, std.MSG_DONTWAIT)  # a blocking socket, but this call does not wait
        cli.sendall(b"peekaboo")
        assert srv.recv(8, std.MSG_PEEK | std.MSG_WAITALL) == b"peekaboo"  # waits for all 8, takes none
        assert srv.recv(4, std.MSG_PEEK) == b"peek"
        assert srv.recv(8) == b"peekaboo"

        # MSG_WAITALL: the bytes come in three pieces; one recv returns all of them
        def trickle():
            for piece in (b"aaaa", b"bbbb", b"cccc"):
                time.sleep(0.05)  # the pieces must arrive apart: that is the behaviour under test
                cli.sendall(piece)

        t = threading.Thread(target=trickle)
        t.start()
        assert srv.recv(12, std.MSG_WAITALL) == b"aaaabbbbcccc"
        t.join()
        # MSG_WAITALL stops at EOF with what it has
        cli.sendall(b"tail")
        cli.shutdown(std.SHUT_WR)
        assert srv.recv(100, std.MSG_WAITALL) == b"tail"

        with pytest.raises(OSError) as e:
            srv.recv(1, std.MSG_OOB)  # no urgent data: EINVAL, as Linux
        assert e.value.errno == errno.EINVAL
        with pytest.raises(OSError) as e:
            srv.recv(1, std.MSG_ERRQUEUE)
        assert e.value.errno == errno.EOPNOTSUPP
        with pytest.raises(OSError) as e:
            srv.send(b"!", std.MSG_OOB)
        assert e.value.errno == errno.EOPNOTSUPP
    finally:
        cli.close()
        srv.close()


def test_udp_flags_and_msg_calls(net):
    u1, u2 = udp_pair(*net, 7308)
    try:
        with pytest.raises(BlockingIOError):
            u1.recv(10, std.MSG_DONTWAIT)
        assert u2.sendmsg([b"da", b"tagram"], [], 0, (A, 7308)) == 8
        assert u1.recvfrom(100, std.MSG_PEEK)[0] == b"datagram"  # still queued
        data, anc, flags, address = u1.recvmsg(4)
        assert data == b"data" and anc == [] and flags == std.MSG_TRUNC and address == (B, u2.getsockname()[1])
        with pytest.raises(BlockingIOError):
            u1.recv(10, std.MSG_DONTWAIT)  # the truncated rest is gone, as on Linux
        with pytest.raises(OSError) as e:
            u2.sendto(b"x", std.MSG_MORE, (A, 7308))
        assert e.value.errno == errno.EOPNOTSUPP
    finally:
        u1.close()
        u2.close()


def test_sendfile_copies_with_offset_and_count(net):
    cli, srv = pair(*net, 7309)
    payload = bytes(range(256)) * 1000
    try:
        with tempfile.TemporaryFile() as f:
            f.write(payload)
            f.seek(0)
            assert cli.sendfile(f, 1000, 100_000) == 100_000
            assert f.tell() == 101_000
            # offset 0 is the file's start, not its position (os.sendfile's rule, the stdlib's path for
            # a regular file); the position ends after the last byte sent
            assert cli.sendfile(f) == len(payload) and f.tell() == len(payload)
            cli.shutdown(std.SHUT_WR)
            assert read_all(srv) == payload[1000:101_000] + payload
        with tempfile.TemporaryFile("w") as t, pytest.raises(ValueError):
            cli.sendfile(t)
    finally:
        cli.close()
        srv.close()


def test_so_rcvtimeo_and_sndtimeo_on_a_blocking_socket(net):
    cli, srv = pair(*net, 7310)
    try:
        srv.settimeout(None)
        tv = struct.pack("qq", 0, 200_000)
        srv.setsockopt(std.SOL_SOCKET, std.SO_RCVTIMEO, tv)
        assert srv.getsockopt(std.SOL_SOCKET, std.SO_RCVTIMEO, 16) == tv
        t0 = time.monotonic()
        with pytest.raises(BlockingIOError) as e:  # Linux: EAGAIN when SO_RCVTIMEO expires
            srv.recv(10)
        assert e.value.errno == errno.EAGAIN
        assert 0.15 < time.monotonic() - t0 < 2.0
        with pytest.raises(OSError) as e:
            srv.setsockopt(std.SOL_SOCKET, std.SO_SNDTIMEO, struct.pack("qq", 0, 2_000_000))
        assert e.value.errno == errno.EDOM
        # a Python timeout still wins over SO_RCVTIMEO and raises TimeoutError
        srv.settimeout(0.1)
        with pytest.raises(TimeoutError):
            srv.recv(10)
    finally:
        cli.close()
        srv.close()


def test_garbage_collected_socket_warns_and_closes_its_connection(net):
    cli, srv = pair(*net, 7311)
    conn = cli.connection
    try:
        with pytest.warns(ResourceWarning, match="unclosed"):
            del cli
            gc.collect()
        assert srv.recv(10) == b""  # the peer saw our FIN
        assert conn.orphaned
    finally:
        srv.close()


def test_stdlib_errors_and_errnos(net):
    da, db = net
    s = usocket(db)
    try:
        with pytest.raises(OSError) as e:
            s.recv(1)
        assert e.value.errno == errno.ENOTCONN
        s.settimeout(5)
        with pytest.raises(ConnectionRefusedError) as e:
            s.connect((A, 7399))
        assert e.value.errno == errno.ECONNREFUSED
    finally:
        s.close()
    with pytest.raises(OSError) as e:
        s.getsockname()
    assert e.value.errno == errno.EBADF


def test_so_sndtimeo_bounds_a_blocking_connect_with_einprogress_like_linux(net):
    da, db = net
    s = usocket(db)
    try:
        s.settimeout(None)
        s.setsockopt(std.SOL_SOCKET, std.SO_SNDTIMEO, struct.pack("qq", 0, 150_000))
        t0 = time.monotonic()
        with pytest.raises(BlockingIOError) as e:
            s.connect(("198.18.0.9", 7312))  # nobody there: ARP goes unanswered, so does the SYN
        assert e.value.errno == errno.EINPROGRESS and 0.1 < time.monotonic() - t0 < 2.0
        assert s.connection.state.name == "SYN_SENT"  # still trying, as Linux
    finally:
        s.close()


def test_tcp_congestion_selects_the_algorithm_by_name_as_linux(net):
    """setsockopt(IPPROTO_TCP, TCP_CONGESTION, b"bbr") before or after connect; getsockopt answers the name
    NUL-padded to the length asked; an unknown name is ENOENT, as in Linux."""
    da, db = net
    lst = usocket(da)
    lst.bind(("0.0.0.0", 7390))
    lst.listen(4)
    lst.settimeout(5)
    cli = usocket(db)
    cli.settimeout(5)
    try:
        assert cli.getsockopt(std.IPPROTO_TCP, std.TCP_CONGESTION, 16) == b"cubic".ljust(16, b"\0")
        cli.setsockopt(std.IPPROTO_TCP, std.TCP_CONGESTION, b"bbr")
        cli.connect((A, 7390))
        srv, _ = lst.accept()
        assert cli._conn.sender.cc.name == "bbr" and cli._conn.sender.rs is not None
        assert cli.getsockopt(std.IPPROTO_TCP, std.TCP_CONGESTION, 16) == b"bbr".ljust(16, b"\0")
        with pytest.raises(OSError) as e:
            cli.setsockopt(std.IPPROTO_TCP, std.TCP_CONGESTION, b"vegas")
        assert e.value.errno == errno.ENOENT
        cli.setsockopt(std.IPPROTO_TCP, std.TCP_CONGESTION, b"reno\0")  # on a live connection
        assert cli._conn.sender.cc.name == "newreno" and cli._conn.sender.rs is None
        cli.sendall(b"x" * 100000)
        cli.shutdown(std.SHUT_WR)
        assert read_all(srv) == b"x" * 100000
        srv.close()
    finally:
        cli.close()
        lst.close()
