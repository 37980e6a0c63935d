"""The lending API on native stream sockets: send_reserve/send_commit and recv_views, from threads."""

from __future__ import annotations

import errno
import hashlib
import threading

import pytest

from ustack.api.base import MSG_DONTWAIT

from .test_socket_calls import pair


def test_reserve_commit_to_views_is_exact(net):
    cli, srv = pair(*net, 7401)
    data = hashlib.sha256(b"lend").digest() * 40_000  # 1.28 MB
    errors = []

    def writer():
        try:
            pos = 0
            while pos < len(data):
                view = cli.send_reserve(len(data) - pos)
                n = len(view)
                view[:] = data[pos:pos + n]
                assert cli.send_commit(n) == n
                pos += n
            cli.shutdown(1)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    t = threading.Thread(target=writer)
    t.start()
    got = hashlib.sha256()
    total = 0
    while True:
        with srv.recv_views(1 << 16) as lent:
            if not lent.nbytes:
                break
            assert sum(len(v) for v in lent.views) == lent.nbytes <= 1 << 16
            for v in lent:
                got.update(v)
            total += lent.nbytes
        assert lent.released
    t.join(10)
    assert not errors and total == len(data) and got.digest() == hashlib.sha256(data).digest()
    conn = srv._conn
    assert conn.receiver.rcvbuf.lent == 0 and srv.stack.rx_hold.held == 0
    cli.close()
    srv.close()


def test_send_while_reserved_and_flags(net):
    cli, srv = pair(*net, 7402)
    try:
        view = cli.send_reserve(5)
        view[:5] = b"hello"
        with pytest.raises(BufferError):
            cli.send(b"x")  # one writer at a time: commit first
        cli.send_commit(5)
        cli.sendall(b" world")
        with pytest.raises(OSError) as e:
            srv.recv_views(10, flags=0x1)  # MSG_OOB
        assert e.value.errno == errno.EINVAL
        got = b""
        while len(got) < 11:
            lent = srv.recv_views(64)
            got += lent.tobytes()
            lent.release()
        assert got == b"hello world"
        with pytest.raises(BlockingIOError):
            srv.recv_views(64, MSG_DONTWAIT)
        cli.close()
        lent = srv.recv_views(64)
        assert lent.nbytes == 0 and lent.views == []  # EOF
        lent.release()
    finally:
        srv.close()
