"""The native ustack event loop: datagram endpoints, the sock_* methods, ssl= and start_tls (pipe backend)."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl

import pytest

from tests.api.aio_pair import A, B, Pair
from ustack.api.aio.transport import DatagramTransport, StreamTransport


@pytest.fixture
def pair():
    p = Pair()
    yield p
    p.close()



class UdpEcho(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data[::-1], addr)


class UdpCollect(asyncio.DatagramProtocol):
    def __init__(self, want):
        self.got = []
        self.want = want
        self.done = asyncio.get_event_loop().create_future()
        self.errors = []

    def datagram_received(self, data, addr):
        self.got.append((data, addr))
        if len(self.got) == self.want and not self.done.done():
            self.done.set_result(None)

    def error_received(self, exc):
        self.errors.append(exc)


def test_datagram_endpoint_echo_in_order_exact(pair):
    payloads = [os.urandom(n) for n in (1, 100, 1472, 8000, 512)]  # 8000: fragmented and reassembled

    async def client():
        s = pair.b_socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((B, 0))
        tr, proto = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: UdpCollect(len(payloads)), sock=s)
        for p in payloads:
            tr.sendto(p, (A, 9000))
        await asyncio.wait_for(proto.done, 10)
        tr.close()
        return proto.got

    async def main():
        tr, _ = await asyncio.get_running_loop().create_datagram_endpoint(UdpEcho, local_addr=(A, 9000))
        assert isinstance(tr, DatagramTransport) and tr.get_extra_info("sockname") == (A, 9000)
        try:
            return await pair.b_run(client())
        finally:
            tr.close()

    got = pair.run(main())
    assert [d for d, _ in got] == [p[::-1] for p in payloads]
    assert all(addr == (A, 9000) for _, addr in got)


def test_connected_datagram_endpoint_reports_port_unreachable(pair):
    async def main():
        tr, proto = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: UdpCollect(1), remote_addr=(B, 9999))  # nobody listens on B:9999
        assert tr.get_extra_info("peername") == (B, 9999)
        with pytest.raises(ValueError):
            tr.sendto(b"x", (B, 1))
        tr.sendto(b"anyone?")
        for _ in range(400):
            if proto.errors:
                break
            await asyncio.sleep(0.005)
        tr.close()
        return proto.errors

    errors = pair.run(main())
    assert errors and isinstance(errors[0], ConnectionRefusedError)


def test_sock_methods_on_ustack_sockets_both_kinds(pair):
    payload = os.urandom(300_000)

    async def b_side():
        loop = asyncio.get_running_loop()
        s = pair.b_socket()
        await loop.sock_connect(s, (A, 7100))
        await loop.sock_sendall(s, payload)
        s.shutdown(socket.SHUT_WR)
        buf = bytearray(10)
        n = await loop.sock_recv_into(s, buf)
        s.close()
        u = pair.b_socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind((B, 9100))
        data, addr = await loop.sock_recvfrom(u, 100)
        await loop.sock_sendto(u, data.upper(), addr)
        u.close()
        return bytes(buf[:n])

    async def main():
        loop = asyncio.get_running_loop()
        lsock = socket.socket()  # the patched class: a ustack socket once bound
        lsock.bind((A, 7100))
        lsock.listen()
        lsock.setblocking(False)
        b = asyncio.ensure_future(pair.b_run(b_side()))
        conn, addr = await loop.sock_accept(lsock)
        assert addr[0] == B and not conn.getblocking()
        got = bytearray()
        while True:
            chunk = await loop.sock_recv(conn, 65536)
            if not chunk:
                break
            got += chunk
        await loop.sock_sendall(conn, b"thank you")
        conn.close()
        lsock.close()
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind((A, 0))
        u.setblocking(False)
        for _ in range(200):  # B's endpoint may not be bound yet: resend until answered
            await loop.sock_sendto(u, b"ping", (B, 9100))
            try:
                buf = bytearray(100)
                n, addr = await asyncio.wait_for(loop.sock_recvfrom_into(u, buf), 0.05)
                reply = (bytes(buf[:n]), addr)
                break
            except asyncio.TimeoutError:
                continue
        u.close()
        return bytes(got), await b, reply

    got, b_got, reply = pair.run(main())
    assert got == payload
    assert b_got == b"thank you"
    assert reply == (b"PING", (B, 9100))


def test_sock_connect_refused_is_connection_refused(pair):
    async def main():
        s = socket.socket()
        s.setblocking(False)
        try:
            with pytest.raises(ConnectionRefusedError):
                await asyncio.get_running_loop().sock_connect(s, (B, 7199))
        finally:
            s.close()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(B, 7199)

    pair.run(main())


def test_ssl_server_and_client_and_start_tls(pair, certificate):
    cert, key = certificate
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=cert)
    payload = os.urandom(200_000)

    async def handler(reader, writer):
        data = await reader.readexactly(len(payload))
        writer.write(data[::-1])
        await writer.drain()
        writer.close()

    async def b_client(port, start_tls):
        loop = asyncio.get_running_loop()
        s = pair.b_socket()
        await loop.sock_connect(s, (A, port))
        if start_tls:
            r, w = await asyncio.open_connection(sock=s)
            w.write(b"STARTTLS\n")
            assert await r.readline() == b"GO\n"
            await w.start_tls(client_ctx, server_hostname=A)
        else:
            r, w = await asyncio.open_connection(sock=s, ssl=client_ctx, server_hostname=A)
        assert w.get_extra_info("ssl_object").version().startswith("TLS")
        w.write(payload)
        got = await r.read(-1)
        w.close()
        return got

    async def starttls_handler(reader, writer):
        assert await reader.readline() == b"STARTTLS\n"
        writer.write(b"GO\n")
        await writer.drain()
        await writer.start_tls(server_ctx)
        await handler(reader, writer)

    async def main():
        srv = await asyncio.start_server(handler, A, 7200, ssl=server_ctx)
        srv2 = await asyncio.start_server(starttls_handler, A, 7201)
        try:
            one = await pair.b_run(b_client(7200, False))
            two = await pair.b_run(b_client(7201, True))
        finally:
            srv.close()
            srv2.close()
            await srv.wait_closed()
            await srv2.wait_closed()
        return one, two

    one, two = pair.run(main())
    assert one == payload[::-1] and two == payload[::-1]


def test_ssl_client_by_address_on_the_patched_host(pair, certificate):
    """ssl= with a host name on A (asyncio's create_connection end to end) against a TLS server on B."""
    cert, key = certificate
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context()
    client_ctx.check_hostname = False  # the certificate names A; the server here is B
    client_ctx.load_verify_locations(cert)

    async def b_server():
        s = pair.b_socket()
        s.bind((B, 7300))
        s.listen()

        async def handler(reader, writer):
            writer.write((await reader.readline()).upper())
            await writer.drain()
            writer.close()

        return await asyncio.start_server(handler, sock=s, ssl=server_ctx)

    async def main():
        srv = await pair.b_run(b_server())
        r, w = await asyncio.open_connection(B, 7300, ssl=client_ctx)
        assert isinstance(w.transport._ssl_protocol._transport, StreamTransport)
        w.write(b"over tls on ustack\n")
        line = await r.readline()
        w.close()
        await w.wait_closed()
        pair.lb.call_soon_threadsafe(srv.close)
        return line

    assert pair.run(main()) == b"OVER TLS ON USTACK\n"
