"""IPv6 between two stacks over the pipe on the manual clock: SLAAC link-local + DAD, NDP, ICMPv6 echo,
UDP (fragmented too) and TCP exact both ways, IPv4 on the same interface at the same time."""

from __future__ import annotations

import hashlib

import pytest

from ustack.net.addr import ANY4, ANY6, parse as ip_addr
from ustack.net.ndp import REACHABLE, STALE
from ustack.net.route6 import PREFERRED, is_link_local

from .netsim import Net

A6, B6 = ip_addr("fd00::1"), ip_addr("fd00::2")


def net6(**kw):
    net = Net(a_addr=["198.18.0.1/24", "fd00::1/64"], b_addr=["198.18.0.2/24", "fd00::2/64"], **kw)
    assert net.run(lambda: all(s.iface6.link_local for s in net.stacks) and A6 in net.a.iface6.preferred()
                   and B6 in net.b.iface6.preferred(), 5)
    return net


def ping(net, src_stack, dst, payload=b"ping6"):
    got = []
    src_stack.icmpv6.echo_handlers[7] = lambda seq, ident, data, src, now, hl: got.append((seq, data, src))
    src_stack.icmpv6.ping(dst, 7, 1, net.clock.now, payload)
    net.run(lambda: got, 5)
    return got


def test_dad_then_link_local_and_global_answer_ping():
    with net6() as net:
        lla_b = net.b.iface6.link_local
        assert is_link_local(lla_b) and lla_b[:8] == bytes.fromhex("fe80000000000000")
        assert net.b.stats["ndp.dad_succeeded"] == 2 and net.b.stats["ndp.dad_solicitations_sent"] == 2
        assert ping(net, net.a, B6) == [(1, b"ping6", B6)]
        assert ping(net, net.a, lla_b, b"to the link-local") == [(1, b"to the link-local", lla_b)]
        assert net.a.ndp.cache[B6].state == REACHABLE
        # IPv4 on the same interface at the same time.
        got = []
        net.a.icmp.echo_handlers[3] = lambda seq, i, data, src, now, ttl: got.append(data)
        net.a.icmp.ping(ip_addr("198.18.0.2"), 3, 1, net.clock.now, b"v4 too")
        net.run(lambda: got, 5)
        assert got == [b"v4 too"]


def test_stable_interface_identifier_rfc7217():
    # The same secret and MAC give the same link-local address; another secret another one.
    ids = []
    for secret in (b"s" * 16, b"s" * 16, b"t" * 16):
        with Net(a_addr=["198.18.0.1/24", "fd00::1/64"]) as net:
            net.a.ndp.stable_secret = secret
            net.run(lambda: net.a.iface6.link_local, 5)
            ids.append(net.a.iface6.link_local)
    assert ids[0] == ids[1] != ids[2]
    expect = hashlib.sha256(bytes.fromhex("fe80000000000000") + net.a.iface6.mac + b"\0" + b"t" * 16).digest()[:8]
    assert ids[2][8:] == expect


def test_udp_over_ipv6_exact_including_fragments():
    with net6() as net:
        srv = net.a.udp.endpoint()
        net.a.udp.bind(srv, ANY6, 7000)
        cli = net.b.udp.endpoint()
        sizes = [0, 1, 1232, 1452, 1453, 5000, 20000, 65527]
        for n in sizes:
            data = hashlib.sha256(str(n).encode()).digest() * (n // 32 + 1)
            cli.sendto(data[:n], A6, 7000, net.clock.now)
        net.run(lambda: len(srv.queue) == len(sizes), 10)
        got = [srv.pop() for _ in sizes]
        assert [len(d) for d, _, _ in got] == sizes
        assert all(src == B6 and port == cli.local_port for _, src, port in got)
        assert got[5][0] == (hashlib.sha256(b"5000").digest() * 157)[:5000]
        assert net.b.stats["ipv6.fragments_sent"] > 0 and net.a.stats["ipv6.reassembled"] == 4
        # A dual-stack endpoint on :: hears IPv4 as well.
        cli.sendto(b"v4", ip_addr("198.18.0.1"), 7000, net.clock.now)
        net.run(lambda: srv.queue, 5)
        assert srv.pop() == (b"v4", ip_addr("198.18.0.2"), cli.local_port)


def test_udp_port_unreachable_over_ipv6():
    with net6() as net:
        cli = net.b.udp.endpoint()
        net.b.udp.connect(cli, A6, 9)
        cli.sendto(b"x", A6, 9, net.clock.now)
        net.run(lambda: cli.error is not None, 5)
        assert isinstance(cli.error, ConnectionRefusedError)
        assert net.a.stats["icmpv6.errors_sent.type1.code4"] == 1


def _pump(net, sender, receiver, data):
    sent = [0]
    got = bytearray()

    def step():
        if sent[0] < len(data):
            sent[0] += sender.send(data[sent[0]:sent[0] + 65536], net.clock.now)
        got.extend(receiver.recv(1 << 20))
        return len(got) >= len(data)
    net.run(step, 60)
    return bytes(got)


@pytest.mark.parametrize("direction", ["a_to_b", "b_to_a"])
def test_tcp_over_ipv6_exact_both_ways(direction):
    with net6() as net:
        lst = net.a.tcp.listen((ANY6, 80), 8)
        conn_b = net.b.tcp.connect(None, (A6, 80), net.clock.now)
        accepted = []
        net.run(lambda: accepted.append(lst.accept()) or accepted[-1] is not None, 5)
        conn_a = accepted[-1]
        assert conn_a.remote_addr == B6 and conn_b.local_addr == B6
        assert conn_b.tcb.snd_mss == 1500 - 60 - 12  # MSS from the IPv6 MTU, less timestamps
        data = hashlib.sha256(direction.encode()).digest() * 40000  # 1.28 MB
        if direction == "a_to_b":
            assert _pump(net, conn_a, conn_b, data) == data
        else:
            assert _pump(net, conn_b, conn_a, data) == data


def test_snapshot_and_stats_show_addresses_and_the_neighbour_cache():
    from ustack.tools.stats_render import render

    with net6() as net:
        assert ping(net, net.a, B6)
        snap = net.a.snapshot(net.clock.now)
        assert {"addr": "fd00::1/64", "state": "preferred", "origin": "static"} in snap["ipv6"]["addresses"]
        assert {"ip": "fd00::2", "mac": net.b.iface.mac.hex(":"), "state": "REACHABLE"} in snap["ndp"]
        snap["stack"].update(uptime=1.0, pid=1)
        text = render(snap)
        assert "IPv6 fd00::1/64 fe80::" in text and "NDP" in text and "fd00::2" in text and "REACHABLE" in text


def test_random_interface_identifiers_rfc8981():
    lls = []
    for _ in range(2):
        with Net(a_addr=["198.18.0.1/24", "fd00::1/64"], b_addr="198.18.0.2/24") as net:
            net.a.ndp.iid = "random"
            net.run(lambda: net.a.iface6.link_local, 5)
            lls.append(net.a.iface6.link_local)
    assert lls[0] != lls[1] and all(ll[:8] == bytes.fromhex("fe80000000000000") for ll in lls)
    with pytest.raises(ValueError):
        from ustack.net.ndp import NdpLayer
        NdpLayer(None, None, None, None, stable_secret=b"x" * 16, iid="eui64")
