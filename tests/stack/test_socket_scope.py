"""Scope ids (RFC 4007) on AF_INET6 sockets between two stacks over the pipe (driver threads): link-local
peers and local addresses carry the interface's scope id in getpeername/getsockname/accept/recvfrom,
"%zone" and a scope_id of the interface are accepted, another one is a clear error."""

from __future__ import annotations

import errno
import socket as std

import pytest

from ustack.api.base import interface_zone, parse_address
from ustack.api.socket import socket as usocket
from ustack.net.addr import parse as ip_addr, to_str

from .test_socket_ipv6 import net  # noqa: F401  (the fixture: two dual-stack stacks on the pipe)

SCOPE = 1  # the pipe has no kernel interface: scope id 1


def lla(driver) -> str:
    return to_str(driver.stack.iface6.link_local)


def test_tcp_link_local_addresses_carry_the_scope_id(net):  # noqa: F811
    a, b = net
    assert interface_zone(a.stack) == (SCOPE, None)
    srv = usocket(a, std.AF_INET6)
    srv.bind((lla(a), 7100, 0, SCOPE))
    srv.listen()
    srv.settimeout(5)
    assert srv.getsockname() == (lla(a), 7100, 0, SCOPE)
    for target in ((lla(a), 7100, 0, SCOPE), (lla(a) + "%1", 7100), (lla(a), 7100)):
        c = usocket(b, std.AF_INET6)
        c.settimeout(5)
        c.connect(target)
        conn, peer = srv.accept()
        assert peer == (lla(b), c.getsockname()[1], 0, SCOPE)
        assert c.getpeername() == (lla(a), 7100, 0, SCOPE) and c.getsockname()[0::3] == (lla(b), SCOPE)
        assert conn.getpeername() == peer and conn.getsockname() == (lla(a), 7100, 0, SCOPE)
        c.sendall(b"scoped")
        conn.settimeout(5)
        assert conn.recv(10) == b"scoped"
        conn.close()
        c.close()
    srv.close()


def test_wrong_scope_ids_are_rejected_clearly(net):  # noqa: F811
    a, b = net
    c = usocket(b, std.AF_INET6)
    c.settimeout(5)
    with pytest.raises(OSError) as e:
        c.connect((lla(a), 7101, 0, 7))
    assert e.value.errno == errno.ENETUNREACH and "scope id 7 is not this stack's interface" in str(e.value)
    with pytest.raises(std.gaierror):
        c.connect((lla(a) + "%nosuch0", 7101))
    with pytest.raises(OSError) as e:
        c.connect((lla(a) + "%1", 7101, 0, 2))
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        c.bind((lla(b), 0, 0, 3))
    assert e.value.errno == errno.ENETUNREACH
    u = usocket(b, std.AF_INET6, std.SOCK_DGRAM)
    with pytest.raises(OSError) as e:
        u.sendto(b"x", (lla(a), 9, 0, 5))
    assert e.value.errno == errno.ENETUNREACH
    with pytest.raises(TypeError):
        u.sendto(b"x", (lla(a), 9, 0, "1"))
    with pytest.raises(OverflowError):
        u.sendto(b"x", (lla(a), 9, 1 << 20, 1))
    # A global address ignores the scope id (as Linux) and reports 0.
    assert parse_address(("fd00::1", 9, 0, 7), std.AF_INET6, zone=(1, None)) == (ip_addr("fd00::1"), 9)
    c.close()
    u.close()


def test_udp_recvfrom_a_link_local_peer_reports_its_scope(net):  # noqa: F811
    a, b = net
    srv = usocket(a, std.AF_INET6, std.SOCK_DGRAM)
    srv.bind(("::", 5400))
    srv.settimeout(5)
    cli = usocket(b, std.AF_INET6, std.SOCK_DGRAM)
    cli.settimeout(5)
    cli.sendto(b"from fe80", (lla(a) + "%1", 5400))
    data, addr = srv.recvfrom(100)
    assert data == b"from fe80" and addr == (lla(b), cli.getsockname()[1], 0, SCOPE)
    srv.sendto(b"back", addr)
    assert cli.recvfrom(100) == (b"back", (lla(a), 5400, 0, SCOPE))
    cli.sendto(b"global", ("fd00::1", 5400))
    data, addr = srv.recvfrom(100)
    assert addr == ("fd00::2", cli.getsockname()[1], 0, 0)
    srv.close()
    cli.close()


def test_interface_zone_is_the_kernel_index_of_the_backend_interface():
    class Caps:
        extra = {"ifname": "lo"}

    class Dev:
        capabilities = Caps()

    class St:
        device = Dev()

    assert interface_zone(St()) == (std.if_nametoindex("lo"), "lo")
    Caps.extra = {"ifname": "nosuchif9"}
    assert interface_zone(St()) == (1, "nosuchif9")


def test_asyncio_transports_report_ipv6_addresses_as_the_socket_does():
    """The native loop's transports: sockname/peername and datagram sources as 4-tuples with the scope id."""
    import asyncio

    from ustack.api.aio import EventLoop
    from ustack.api.clock import MonotonicClock
    from ustack.api.driver import Driver
    from ustack.backends.pipe import PipeLink
    from ustack.stack import Stack

    clock = MonotonicClock()
    link = PipeLink(clock, delay=0.0002)
    sa, sb = Stack(link.a, "fd00::1/64"), Stack(link.b, "fd00::2/64")
    da, db = Driver(sa, clock), Driver(sb, clock)
    db.start()
    for d in (da, db):
        assert d.wait_until(lambda d=d: d.stack.iface6.link_local is not None and not any(
            e.state == "tentative" for e in d.stack.iface6.addresses.values()), 5)
    loop = EventLoop(da)
    try:
        got = loop.create_future()

        class Proto(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                got.set_result((data, addr))

        us = usocket(da, std.AF_INET6, std.SOCK_DGRAM)
        us.bind(("::", 5600))
        us.setblocking(False)
        transport, _ = loop.run_until_complete(loop.create_datagram_endpoint(Proto, sock=us))
        assert transport.get_extra_info("sockname") == ("::", 5600, 0, 0)
        peer = usocket(db, std.AF_INET6, std.SOCK_DGRAM)
        peer.sendto(b"to the loop", (lla(da) + "%1", 5600))
        data, addr = loop.run_until_complete(asyncio.wait_for(got, 5))
        assert data == b"to the loop" and addr == (lla(db), peer.getsockname()[1], 0, SCOPE)
        transport.close()
        srv = usocket(db, std.AF_INET6)
        srv.bind(("::", 7600))
        srv.listen()
        c = usocket(da, std.AF_INET6)
        c.setblocking(False)

        async def connect():
            await loop.sock_connect(c, (lla(db), 7600, 0, SCOPE))
            return await loop.create_connection(asyncio.Protocol, sock=c)

        tr, _ = loop.run_until_complete(asyncio.wait_for(connect(), 5))
        assert tr.get_extra_info("peername") == (lla(db), 7600, 0, SCOPE)
        assert tr.get_extra_info("sockname") == c.getsockname() and c.getsockname()[3] == SCOPE
        tr.close()
        loop.run_until_complete(asyncio.sleep(0))
        srv.close()
        peer.close()
    finally:
        loop.close()
        da.close()
        db.close()
        link.close()
