"""The native ustack event loop: streams, flow control, RST, close/abort, timers (pipe backend, no root)."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import socket
import struct
import time

import pytest

from tests.api.aio_pair import A, B, Pair
from ustack.api.aio import EventLoop
from ustack.api.aio.transport import StreamTransport

MB = 1 << 20


@pytest.fixture
def pair():
    p = Pair()
    yield p
    p.close()


async def _echo(reader, writer):
    while True:
        data = await reader.read(65536)
        if not data:
            break
        writer.write(data)
        await writer.drain()
    writer.close()


def test_stream_echo_one_megabyte_each_way_exact(pair):
    payload = os.urandom(MB)

    async def client():
        s = pair.b_socket()
        await asyncio.get_running_loop().sock_connect(s, (A, 7001))
        r, w = await asyncio.open_connection(sock=s)
        assert isinstance(w.transport, StreamTransport)
        assert w.get_extra_info("peername") == (A, 7001) and w.get_extra_info("sockname")[0] == B
        assert w.get_extra_info("socket").getpeername() == (A, 7001)  # asyncio's TransportSocket over ours
        assert w.transport._usock._h.rfd is None  # no readiness fd: the transport sits on the connection

        async def send():
            w.write(payload)
            await w.drain()
            w.write_eof()

        sender = asyncio.ensure_future(send())
        got = await r.read(-1)  # until the server's FIN, which follows our write_eof
        await sender
        w.close()
        await w.wait_closed()
        return got

    async def main():
        srv = await asyncio.start_server(_echo, A, 7001)
        assert srv.sockets[0].getsockname() == (A, 7001)
        try:
            return await pair.b_run(client())
        finally:
            srv.close()
            await srv.wait_closed()

    got = pair.run(main())
    assert len(got) == len(payload) and hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()
    assert pair.sa.stats["stack.internal_error"] == 0
    assert pair.la._driver._thread is None  # no driver thread: the loop polled the stack itself
    assert pair.la.stack_rounds > 0


class Recorder(asyncio.Protocol):
    """Records what a transport tells its protocol."""

    def __init__(self):
        self.data = bytearray()
        self.events = []
        self.lost = asyncio.get_event_loop().create_future()
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.data += data

    def eof_received(self):
        self.events.append("eof")

    def pause_writing(self):
        self.events.append("pause_writing")

    def resume_writing(self):
        self.events.append("resume_writing")

    def connection_lost(self, exc):
        self.events.append("lost")
        if not self.lost.done():
            self.lost.set_result(exc)


async def _until(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


async def _b_connect(pair, port, proto):
    loop = asyncio.get_running_loop()
    s = pair.b_socket()
    await loop.sock_connect(s, (A, port))
    return await loop.create_connection(lambda: proto, sock=s)


class PausedReader(Recorder):
    """A server protocol that does not read until told to (pause_reading from the start)."""

    def connection_made(self, transport):
        super().connection_made(transport)
        transport.pause_reading()


def test_flow_control_a_slow_reader_pauses_the_writer_and_resume_drains_exact(pair):
    """The writer is paused only once the reader's window closed and both buffers filled (the water marks)."""
    chunk = 16 * 1024
    total = 3 * MB
    payload = os.urandom(total)
    server = {}

    def factory():
        server["p"] = p = PausedReader()
        return p

    async def write_until_paused(wproto):
        tr, _ = await _b_connect(pair, 7002, wproto)
        sent = 0
        while "pause_writing" not in wproto.events:
            tr.write(payload[sent:sent + chunk])
            sent += chunk
            await asyncio.sleep(0.002)  # let the stack run: segments out, ACKs and window updates in
        return tr, sent, tr.get_write_buffer_size()

    async def write_rest(tr, wproto, sent):
        while sent < total:
            if "pause_writing" in wproto.events[-1:]:
                await asyncio.sleep(0.002)
                continue
            tr.write(payload[sent:sent + chunk])
            sent += chunk
        tr.close()

    async def main():
        srv = await pair.la.create_server(factory, A, 7002)
        wproto = await pair.b_run(_make_recorder())
        tr, sent, buffered = await pair.b_run(write_until_paused(wproto))
        sp = server["p"]
        conn = sp.transport._conn
        rcvbuf, sndbuf = conn.config.rcvbuf, pair.sb.tcp.config.sndbuf
        assert not sp.transport.is_reading() and len(sp.data) == 0
        # paused only after the reader's receive buffer (its window) and the writer's send buffer filled,
        # and the transport's own buffer passed the high-water mark (64 KiB)
        assert rcvbuf - len(conn.receiver.rcvbuf) < 2 * 1460
        assert conn.info().rcv_wnd < 2 * 1460  # the window we advertise closed
        assert 64 * 1024 < buffered <= 64 * 1024 + chunk
        assert sent >= rcvbuf - 2 * 1460 + sndbuf + 64 * 1024
        await asyncio.sleep(0.1)
        assert len(sp.data) == 0 and wproto.events == ["pause_writing"]  # nothing moves while paused
        sp.transport.resume_reading()
        await _until(lambda: "resume_writing" in wproto.events)
        await pair.b_run(write_rest(tr, wproto, sent))
        await _until(lambda: len(sp.data) == total)
        assert bytes(sp.data) == payload
        assert wproto.events[:2] == ["pause_writing", "resume_writing"]
        srv.close()
        await srv.wait_closed()

    pair.run(main())


async def _make_recorder():
    return Recorder()


def test_rst_from_the_peer_is_connection_reset_error_in_connection_lost(pair):
    server = {}

    class Greeter(Recorder):
        def connection_made(self, transport):
            super().connection_made(transport)
            transport.write(b"accepted")

    def factory():
        server["p"] = p = Greeter()
        return p

    async def client():
        loop = asyncio.get_running_loop()
        s = pair.b_socket()
        await loop.sock_connect(s, (A, 7003))
        assert await loop.sock_recv(s, 100) == b"accepted"  # reset only what the server accepted
        await loop.sock_sendall(s, b"hello")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # RST

    async def main():
        srv = await pair.la.create_server(factory, A, 7003)
        await pair.b_run(client())
        await _until(lambda: "p" in server)
        exc = await asyncio.wait_for(server["p"].lost, 10)
        assert isinstance(exc, ConnectionResetError) and exc.errno == errno.ECONNRESET
        assert bytes(server["p"].data) == b"hello"
        assert server["p"].transport.is_closing()
        srv.close()
        await srv.wait_closed()

    pair.run(main())


def test_abort_closes_as_a_kernel_socket_and_close_sends_buffered_data_then_fin(pair):
    payload = os.urandom(MB)
    server = []

    class PausedAtOnce(Recorder):
        def connection_made(self, transport):
            super().connection_made(transport)
            transport.pause_reading()  # what the peer sends stays unread in the connection

    def factory():
        p = PausedAtOnce() if len(server) == 2 else Recorder()
        server.append(p)
        return p

    async def read_all(port):
        loop = asyncio.get_running_loop()
        s = pair.b_socket()
        await loop.sock_connect(s, (A, port))
        got = bytearray()
        try:
            while True:
                chunk = await loop.sock_recv(s, 65536)
                if not chunk:
                    return bytes(got), None
                got += chunk
        except OSError as e:
            return bytes(got), e
        finally:
            s.close()

    async def send_then_read(port):
        loop = asyncio.get_running_loop()
        s = pair.b_socket()
        await loop.sock_connect(s, (A, port))
        await loop.sock_sendall(s, b"unread by the server")
        try:
            return await loop.sock_recv(s, 10), None
        except OSError as e:
            return b"", e
        finally:
            s.close()

    async def main():
        srv = await pair.la.create_server(factory, A, 7004)
        # close(): everything written is delivered, then EOF
        b = asyncio.ensure_future(pair.b_run(read_all(7004)))
        await _until(lambda: len(server) == 1 and server[0].transport is not None)
        tr = server[0].transport
        tr.write(payload)
        assert tr.get_write_buffer_size() > 0  # more than the send buffer holds
        tr.close()
        assert tr.is_closing()
        got, err = await b
        assert err is None and got == payload
        assert await asyncio.wait_for(server[0].lost, 5) is None
        # abort(): the transport's own buffer is dropped, the socket closed as asyncio's selector transport
        # does: what the send buffer took still goes, then FIN (no RST: nothing unread); connection_lost(None)
        b = asyncio.ensure_future(pair.b_run(read_all(7004)))
        await _until(lambda: len(server) == 2 and server[1].transport is not None)
        tr = server[1].transport
        tr.write(b"x" * 1000)
        await asyncio.sleep(0.05)
        tr.abort()
        got, err = await b
        assert err is None and got == b"x" * 1000, (got, err)
        assert await asyncio.wait_for(server[1].lost, 5) is None
        # with unread received bytes the close is a RST, as Linux's (RFC 2525 2.17)
        b = asyncio.ensure_future(pair.b_run(send_then_read(7004)))
        await _until(lambda: len(server) == 3 and server[2].transport is not None)
        tr = server[2].transport
        await _until(lambda: len(tr._conn.receiver.rcvbuf) > 0)
        tr.abort()
        got, err = await b
        assert isinstance(err, ConnectionResetError), (got, err)
        assert pair.sa.stats["tcp.out_rsts"] >= 1
        srv.close()
        await srv.wait_closed()

    pair.run(main())


def test_eof_received_and_write_eof_half_close(pair):
    async def client():
        loop = asyncio.get_running_loop()
        s = pair.b_socket()
        await loop.sock_connect(s, (A, 7005))
        r, w = await asyncio.open_connection(sock=s)
        w.write(b"question")
        w.write_eof()
        answer = await r.read(-1)
        w.close()
        return answer

    async def handler(reader, writer):
        q = await reader.read(-1)  # EOF after "question"
        assert reader.at_eof()
        writer.write(q[::-1])
        await writer.drain()
        writer.close()

    async def main():
        srv = await asyncio.start_server(handler, A, 7005)
        try:
            return await pair.b_run(client())
        finally:
            srv.close()
            await srv.wait_closed()

    assert pair.run(main()) == b"noitseuq"


def test_timers_stay_accurate_while_the_loop_polls_the_stack(pair):
    async def main():
        loop = asyncio.get_running_loop()
        srv = await asyncio.start_server(_echo, A, 7006)  # a stack with a listener and timers of its own
        lateness = []
        for delay in (0.01, 0.05, 0.1, 0.2):
            fired = loop.create_future()
            t0 = loop.time()
            loop.call_later(delay, fired.set_result, None)
            await fired
            lateness.append(loop.time() - t0 - delay)
        srv.close()
        await srv.wait_closed()
        return lateness

    lateness = pair.run(main())
    assert all(0 <= x < 0.02 for x in lateness), lateness


def test_the_loop_sleeps_until_the_stacks_deadline_not_longer():
    """An idle loop with a stack timer due wakes for it: a connect to a silent host retransmits the SYN."""
    from ustack.api.clock import MonotonicClock
    from ustack.api.driver import Driver
    from ustack.backends.pipe import PipeLink
    from ustack.stack import Stack

    clock = MonotonicClock()
    link = PipeLink(clock)
    st = Stack(link.a, f"{A}/24")
    d = Driver(st, clock)
    loop = EventLoop(d)
    try:
        async def main():
            s = d.socket()
            s.setblocking(False)
            task = asyncio.ensure_future(loop.sock_connect(s, (B, 9)))  # nobody answers ARP on the other end
            await asyncio.sleep(1.5)
            task.cancel()
            s.close()

        loop.run_until_complete(main())
        assert st.stats["arp.requests_sent"] >= 2  # the ARP retry timer fired while the loop slept
        assert loop.stack_rounds > 2
    finally:
        loop.close()
        d.close()
        link.close()


def test_a_readiness_fd_made_later_does_not_take_the_transports_events(pair):
    """fileno() on the transport's socket installs the readiness callback beside the transport's, not over it."""
    async def client():
        loop = asyncio.get_running_loop()
        s = pair.b_socket()
        await loop.sock_connect(s, (A, 7007))
        r, w = await asyncio.open_connection(sock=s)
        fd = w.get_extra_info("socket").fileno()
        assert fd >= 0 and w.transport._usock._h.rfd is not None
        w.write(b"still delivered")
        w.write_eof()
        got = await r.read(-1)
        w.close()
        return got

    async def main():
        srv = await asyncio.start_server(_echo, A, 7007)
        try:
            return await pair.b_run(client())
        finally:
            srv.close()
            await srv.wait_closed()

    assert pair.run(main()) == b"still delivered"


def test_kernel_fds_keep_working_on_the_native_loop(pair):
    """Loopback TCP, AF_UNIX sockets and a subprocess's pipes go through the loop's normal selector."""
    import sys

    async def main():
        loop = asyncio.get_running_loop()
        srv = await asyncio.start_server(_echo, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        assert not isinstance(w.transport, StreamTransport)  # the kernel's, as asyncio makes it
        w.write(b"over loopback")
        w.write_eof()
        loopback = await r.read(-1)
        w.close()
        srv.close()
        await srv.wait_closed()
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        await loop.sock_sendall(a, b"over AF_UNIX")
        unix = await loop.sock_recv(b, 100)
        a.close()
        b.close()
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "print('from a child')",
                                                    stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        return loopback, unix, out, proc.returncode

    assert pair.run(main()) == (b"over loopback", b"over AF_UNIX", b"from a child\n", 0)


def test_loop_sendfile_falls_back_to_writes_with_flow_control(pair, tmp_path):
    body = os.urandom(700_000)
    path = tmp_path / "body.bin"
    path.write_bytes(body)

    async def handler(reader, writer):
        with open(path, "rb") as f:
            sent = await asyncio.get_running_loop().sendfile(writer.transport, f)
        assert sent == len(body)
        writer.close()

    async def client():
        loop = asyncio.get_running_loop()
        s = pair.b_socket()
        await loop.sock_connect(s, (A, 7008))
        r, w = await asyncio.open_connection(sock=s)
        got = await r.read(-1)
        w.close()
        return got

    async def main():
        srv = await asyncio.start_server(handler, A, 7008)
        try:
            return await pair.b_run(client())
        finally:
            srv.close()
            await srv.wait_closed()

    assert pair.run(main()) == body
