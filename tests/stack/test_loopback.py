"""The loopback interface: a Stack with ``loopback=True`` over ``LoopbackDevice`` (127.0.0.1/8, ::1), manual clock."""

from __future__ import annotations

import errno
import os
import socket as std

import pytest

from ustack.api.clock import ManualClock
from ustack.api.driver import Driver
from ustack.api.socket import socket as usocket
from ustack.backends.loopback import LOOPBACK_MTU, LoopbackDevice
from ustack.stack import Stack
from ustack.wire.ethernet import EthernetHeader
from ustack.wire.ipv4 import Ipv4Header
from ustack.wire.tcp import TcpHeader

from .netsim import Recorder


class Lo:
    def __init__(self):
        self.clock = ManualClock(100.0)
        self.dev = Recorder(LoopbackDevice())
        self.stack = Stack(self.dev, ["127.0.0.1/8", "::1/128"], loopback=True)
        self.driver = Driver(self.stack, self.clock)

    def run(self, until, max_time: float = 5.0) -> bool:
        end = self.clock.now + max_time
        while True:
            deadline = self.stack.poll(self.clock.now)
            if until():
                return True
            if self.dev.inner._queue:
                continue  # frames looped back: poll again at the same instant
            if deadline is None or deadline > end:
                return False
            self.clock.set(max(deadline, self.clock.now))

    def close(self):
        assert self.stack.stats["stack.internal_error"] == 0, repr(self.stack.last_internal_error)
        self.driver.close()
        self.dev.close()


@pytest.fixture
def lo():
    net = Lo()
    yield net
    net.close()


def _connected(lo, family, host):
    srv = usocket(lo.driver, family)
    srv.bind((host, 0))
    srv.listen()
    srv.setblocking(False)
    cli = usocket(lo.driver, family)
    cli.setblocking(False)
    assert cli.connect_ex(srv.getsockname()[:2]) == errno.EINPROGRESS
    accepted = []

    def established():
        try:
            accepted.append(srv.accept())
        except BlockingIOError:
            return False
        return True

    assert lo.run(established)
    conn, peer = accepted[0]
    conn.setblocking(False)
    assert lo.run(lambda: cli.getsockopt(std.SOL_SOCKET, std.SO_ERROR) == 0 and cli._conn.state.name == "ESTABLISHED")
    return srv, cli, conn, peer


@pytest.mark.parametrize("family,host", [(std.AF_INET, "127.0.0.1"), (std.AF_INET6, "::1")])
def test_tcp_both_ends_in_one_stack_exact_bytes_and_names(lo, family, host):
    srv, cli, conn, peer = _connected(lo, family, host)
    assert cli.getsockname()[:2] == peer[:2] == conn.getpeername()[:2]
    assert cli.getpeername()[:2] == conn.getsockname()[:2] == srv.getsockname()[:2]
    assert peer[0] == host
    data = os.urandom(300_000)
    sent = bytearray()
    got = bytearray()

    def moved():
        nonlocal sent
        if len(sent) < len(data):
            try:
                sent += data[len(sent):len(sent) + cli.send(data[len(sent):])]
            except BlockingIOError:
                pass
        try:
            got.extend(conn.recv(100_000))
        except BlockingIOError:
            pass
        return len(got) == len(data)

    assert lo.run(moved)
    assert bytes(got) == data
    # the active closer ends in TIME-WAIT, the other side closes
    cli.close()
    assert lo.run(lambda: conn.recv(10) == b"")
    conn.close()
    assert lo.run(lambda: {c.state.name for c in lo.stack.tcp.connections.values()} == {"TIME_WAIT"}, 1.0)
    assert len(lo.stack.tcp.connections) == 1  # the passive closer's TCB is gone
    srv.close()


def test_handshake_segments_loop_mss_from_the_65535_mtu_and_no_arp(lo):
    srv, cli, conn, _ = _connected(lo, std.AF_INET, "127.0.0.1")
    frames = [EthernetHeader.parse(f) for f in lo.dev.sent]
    assert {f.ethertype for f in frames} == {0x0800}  # no ARP on a loopback link
    syns = []
    for raw in lo.dev.sent:
        ip = Ipv4Header.parse(raw[14:])
        assert (bytes(ip.src), bytes(ip.dst)) == (b"\x7f\0\0\1", b"\x7f\0\0\1")
        tcp = TcpHeader.parse(raw[14 + ip.header_len:14 + ip.total_length], ip.src, ip.dst)
        if tcp.flags & 0x02:
            syns.append(tcp)
    assert len(syns) == 2  # SYN and SYN-ACK, nothing retransmitted
    assert all(s.mss == LOOPBACK_MTU - 40 for s in syns)
    for s in (srv, cli, conn):
        s.close()


@pytest.mark.parametrize("family,host", [(std.AF_INET, "127.0.0.1"), (std.AF_INET6, "::1")])
def test_tcp_connect_to_closed_port_is_reset(lo, family, host):
    cli = usocket(lo.driver, family)
    cli.setblocking(False)
    assert cli.connect_ex((host, 9)) == errno.EINPROGRESS
    assert lo.run(lambda: cli.getsockopt(std.SOL_SOCKET, std.SO_ERROR) == errno.ECONNREFUSED)
    assert lo.stack.stats.drops()["tcp.no_socket"] == 1
    cli.close()


@pytest.mark.parametrize("family,host", [(std.AF_INET, "127.0.0.1"), (std.AF_INET6, "::1")])
def test_udp_exact_and_port_unreachable_is_connection_refused(lo, family, host):
    a = usocket(lo.driver, family, std.SOCK_DGRAM)
    b = usocket(lo.driver, family, std.SOCK_DGRAM)
    a.bind((host, 0))
    b.bind((host, 0))
    a.setblocking(False)
    b.setblocking(False)
    payload = os.urandom(60_000)  # one datagram, no fragments under the 65,535-byte MTU
    a.sendto(payload, b.getsockname())
    got = []

    def arrived():
        try:
            got.append(b.recvfrom(65536))
        except BlockingIOError:
            return False
        return True

    assert lo.run(arrived)
    assert got[0][0] == payload and got[0][1][:2] == a.getsockname()[:2]
    assert lo.stack.stats["ipv4.fragments_sent"] == 0
    # a connected socket learns of ICMP port unreachable (ICMPv6 for ::1) as ECONNREFUSED
    a.connect((host, 9))
    a.send(b"anyone?")

    def refused():
        try:
            a.recv(100)
        except BlockingIOError:
            return False
        except ConnectionRefusedError:
            return True
        return False

    assert lo.run(refused)
    assert lo.stack.stats.drops()["udp.no_socket"] == 1
    a.close()
    b.close()


def test_sources_in_127_8_accepted_only_on_loopback(lo):
    assert lo.stack.ipv4.martian_source(b"\x7f\0\0\1", 6, 80) is None
    assert lo.stack.ipv6.martian_source(bytes(15) + b"\1", 6) is None
    assert lo.stack.ipv6.martian_source(b"\xfd" + bytes(14) + b"\1", 6) == "ipv6.martian_source.not_loopback"
    plain = Stack(LoopbackDevice(), "198.18.0.1/24")
    assert plain.ipv4.martian_source(b"\x7f\0\0\1", 6, 80) == "ipv4.martian_source.loopback"
    plain.device.close()


def test_arp_arriving_on_loopback_is_dropped_by_name(lo):
    lo.stack.arp.input(memoryview(bytes(42)), 14, lo.clock.now)
    assert lo.stack.stats.drops()["arp.loopback"] == 1
    assert lo.stack.arp.lookup(b"\x7f\0\0\2", 0.0) == lo.stack.iface.mac


def test_device_overflow_is_counted_and_fd_follows_the_queue():
    dev = LoopbackDevice(max_queued=2)
    slots = dev.tx_reserve(3)
    for s in slots:
        s[:60] = bytes(60)
    dev.tx_commit([60, 60, 60])
    assert dev.counters["overflow"] == 1
    import select
    assert select.select([dev.fileno()], [], [], 0)[0] == [dev.fileno()]
    frames = dev.rx_burst(64)
    assert len(frames) == 2
    dev.rx_release(frames)
    assert select.select([dev.fileno()], [], [], 0)[0] == []
    dev.close()


def test_the_whole_127_slash_8_is_ours_and_replies_come_from_the_address_asked(lo):
    iface = lo.stack.iface
    assert iface.owns(b"\x7f\x03\x04\x05") and iface.is_ours(b"\x7f\0\0\2") and iface.is_local_dest(b"\x7f\1\1\1")
    assert not iface.owns(b"\x7f\xff\xff\xff") and iface.is_broadcast(b"\x7f\xff\xff\xff")  # the /8's broadcast
    plain = Stack(LoopbackDevice(), "198.18.0.1/24")
    assert not plain.iface.owns(b"\xc6\x12\0\2") and not plain.iface.is_ours(b"\xc6\x12\0\2")  # one address only
    plain.device.close()
    srv, cli, conn, peer = _connected(lo, std.AF_INET, "127.3.4.5")
    assert peer[0] == "127.0.0.1" and conn.getsockname() == srv.getsockname() == cli.getpeername()
    ends = {(bytes(Ipv4Header.parse(f[14:]).src), bytes(Ipv4Header.parse(f[14:]).dst)) for f in lo.dev.sent}
    assert ends == {(b"\x7f\0\0\1", b"\x7f\3\4\5"), (b"\x7f\3\4\5", b"\x7f\0\0\1")}
    lo.dev.sent.clear()
    # a closed port on another address of the /8: the RST comes from that address
    other = usocket(lo.driver)
    other.setblocking(False)
    assert other.connect_ex(("127.9.9.9", 9)) == errno.EINPROGRESS
    assert lo.run(lambda: other.getsockopt(std.SOL_SOCKET, std.SO_ERROR) == errno.ECONNREFUSED)
    rst = [f for f in lo.dev.sent if Ipv4Header.parse(f[14:]).src == b"\x7f\x09\x09\x09"]
    assert len(rst) == 1
    # UDP from a socket bound to 127.0.0.2 to one on 127.8.0.1: the frame carries exactly those addresses
    a = usocket(lo.driver, std.AF_INET, std.SOCK_DGRAM)
    b = usocket(lo.driver, std.AF_INET, std.SOCK_DGRAM)
    a.bind(("127.0.0.2", 0))
    b.bind(("127.8.0.1", 0))
    b.setblocking(False)
    lo.dev.sent.clear()
    a.sendto(b"x", b.getsockname())
    assert lo.run(lambda: bool(b._ep.queue))
    assert b.recvfrom(10) == (b"x", a.getsockname())
    ip = Ipv4Header.parse(lo.dev.sent[0][14:])
    assert (bytes(ip.src), bytes(ip.dst)) == (b"\x7f\0\0\2", b"\x7f\x08\0\1")
    for s in (srv, cli, conn, other, a, b):
        s.close()
