"""UDP between two stacks over the pipe backend: sockets, fragmentation, impairment, bounds."""

from __future__ import annotations

import errno
import random

import pytest

from ustack.net.addr import parse as ip_addr
from ustack.api.socket import SOCK_DGRAM, socket as usocket

from .netsim import Net

A = ip_addr("198.18.0.1")
B = ip_addr("198.18.0.2")


def udp_pair(net, port=7000):
    srv = usocket(net.da, type=SOCK_DGRAM)
    srv.bind(("0.0.0.0", port))
    srv.setblocking(False)
    cli = usocket(net.db, type=SOCK_DGRAM)
    cli.setblocking(False)
    return srv, cli


def test_sendto_recvfrom_exact_bytes_and_addresses():
    net = Net()
    srv, cli = udp_pair(net)
    cli.bind(("198.18.0.2", 5555))
    cli.sendto(b"ping!", ("198.18.0.1", 7000))
    net.run(lambda: srv._ep.queue, 2)
    data, addr = srv.recvfrom(2048)
    assert (data, addr) == (b"ping!", ("198.18.0.2", 5555))
    srv.sendto(data.upper(), addr)
    net.run(lambda: cli._ep.queue, 2)
    assert cli.recvfrom(2048) == (b"PING!", ("198.18.0.1", 7000))


def test_nonblocking_recv_raises_blockingioerror():
    net = Net()
    srv, _ = udp_pair(net)
    with pytest.raises(BlockingIOError):
        srv.recvfrom(100)


def test_sizes_0_to_8000_fragmented_both_ways_byte_exact():
    net = Net()
    srv, cli = udp_pair(net)
    rnd = random.Random(3)
    sizes = [0, 1, 1471, 1472, 1473, 2960, 4000, 8000] + [rnd.randrange(0, 8001) for _ in range(40)]
    for size in sizes:
        payload = rnd.randbytes(size)
        cli.sendto(payload, ("198.18.0.1", 7000))
        net.run(lambda: srv._ep.queue, 2)
        data, addr = srv.recvfrom(65535)
        assert data == payload
        srv.sendto(data, addr)
        net.run(lambda: cli._ep.queue, 2)
        assert cli.recv(65535) == payload
    assert net.a.stats["ipv4.reassembled"] > 0 and net.b.stats["ipv4.reassembled"] > 0


def test_recv_into_truncates_like_the_stdlib():
    net = Net()
    srv, cli = udp_pair(net)
    cli.sendto(b"abcdefgh", ("198.18.0.1", 7000))
    net.run(lambda: srv._ep.queue, 2)
    buf = bytearray(4)
    assert srv.recv_into(buf) == 4
    assert buf == b"abcd"


def test_receive_queue_is_bounded_and_counts_drops():
    net = Net()
    srv, cli = udp_pair(net)
    srv.setsockopt(1, 8, 2048)  # SO_RCVBUF: Linux doubles it -> 4096 bytes
    for _ in range(10):
        cli.sendto(b"z" * 1000, ("198.18.0.1", 7000))
    net.run(max_time=1)
    # Each costs 1000 + 768 (the per-datagram overhead, as Linux's skb truesize): two fit in 4096.
    assert len(srv._ep.queue) == 2
    assert srv.drops == 8
    assert net.a.stats["drop.udp.rcvbuf_full"] == 8


def test_connected_socket_hears_only_its_peer_and_gets_refused_error():
    net = Net()
    _, cli = udp_pair(net)
    cli.connect(("198.18.0.1", 9))  # nobody listens on 9
    cli.send(b"anyone?")
    net.run(max_time=1)
    with pytest.raises(ConnectionRefusedError):
        cli.recv(100)


def test_bind_conflicts_and_errors():
    net = Net()
    s1 = usocket(net.da, type=SOCK_DGRAM)
    s1.bind(("0.0.0.0", 53))
    s2 = usocket(net.da, type=SOCK_DGRAM)
    with pytest.raises(OSError) as e:
        s2.bind(("198.18.0.1", 53))
    assert e.value.errno == errno.EADDRINUSE
    with pytest.raises(OSError) as e:
        s2.bind(("10.0.0.1", 54))
    assert e.value.errno == errno.EADDRNOTAVAIL
    with pytest.raises(OSError) as e:
        s2.send(b"x")
    assert e.value.errno == errno.EDESTADDRREQ
    with pytest.raises(OverflowError):
        s2.sendto(b"x", ("198.18.0.1", 70000))
    s1.close()
    with pytest.raises(OSError):
        s1.recv(1)
    s2.bind(("198.18.0.1", 53))  # free again after close


def test_send_without_route_is_unreachable():
    net = Net()
    s = usocket(net.da, type=SOCK_DGRAM)
    with pytest.raises(OSError) as e:
        s.sendto(b"x", ("203.0.113.1", 9))
    assert e.value.errno == errno.ENETUNREACH


def test_gateway_is_used_off_subnet():
    net = Net(gateway_b="198.18.0.1")
    srv, cli = udp_pair(net)
    # b sends to an off-subnet address; the frame goes to a's MAC (the gateway).
    cli.sendto(b"via gw", ("203.0.113.7", 9))
    net.run(max_time=1)
    assert net.b.arp.lookup(A, net.clock.now) is not None
    assert net.a.stats["drop.ipv4.not_for_us"] == 1  # a is not a router


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_impaired_link_never_delivers_corrupt_data(seed):
    net = Net(seed=seed, loss=0.05, duplicate=0.05, reorder=0.1, corrupt=0.05, delay=0.001, jitter=0.002)
    srv, cli = udp_pair(net)
    rnd = random.Random(seed)
    sent = set()
    for i in range(400):
        payload = i.to_bytes(4, "big") + rnd.randbytes(rnd.randrange(0, 3000))
        sent.add(payload)
        cli.sendto(payload, ("198.18.0.1", 7000))
        if i % 20 == 0:
            net.run(max_time=0.01)
    net.run(max_time=40)  # beyond the 30 s reassembly timeout
    got = []
    while srv._ep.queue:
        got.append(srv.recv(65535))
    assert got and all(g in sent for g in got)  # nothing corrupt slipped through
    drops = net.a.stats.drops()
    assert any(k.endswith("bad_checksum") for k in drops), drops
    assert net.a.ipv4.reassembler.held == 0


def test_a_socket_is_made_on_a_driver_not_a_stack():
    net = Net()
    with pytest.raises(TypeError, match="takes a ustack.api.driver.Driver, not Stack"):
        usocket(net.a, type=SOCK_DGRAM)
    net.close()
