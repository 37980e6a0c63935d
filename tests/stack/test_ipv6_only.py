"""An IPv6-only stack (no IPv4 address) beside a dual-stack one over the pipe on the manual clock:
ICMPv6 and TCP exact, IPv4 and ARP frames dropped as ``ipv4.disabled`` and never answered, IPv4
destinations ENETUNREACH, the snapshot and the constructor's checks."""

from __future__ import annotations

import errno
import hashlib
import socket as std

import pytest

from ustack.api.socket import socket as usocket
from ustack.backends.pipe import PipeLink
from ustack.api.clock import ManualClock
from ustack.net.addr import ANY4, ANY6, parse as ip_addr
from ustack.stack import Stack

from .netsim import Net
from .test_ipv6 import _pump

A4, A6, B6 = ip_addr("198.18.0.1"), ip_addr("fd00::1"), ip_addr("fd00::2")


def net6only():
    net = Net(a_addr=["198.18.0.1/24", "fd00::1/64"], b_addr="fd00::2/64")
    assert net.run(lambda: all(s.iface6.link_local for s in net.stacks) and A6 in net.a.iface6.preferred()
                   and B6 in net.b.iface6.preferred(), 5)
    return net


def test_ping_and_tcp_exact_to_an_ipv6_only_stack():
    with net6only() as net:
        b = net.b
        assert b.iface.addr is None and b.addr == "fd00::2" and b.addrs()[0] == "fd00::2/64"
        got = []
        net.a.icmpv6.echo_handlers[5] = lambda seq, ident, data, src, now, hl: got.append((seq, data, src))
        net.a.icmpv6.ping(B6, 5, 1, net.clock.now, b"v6 only")
        net.run(lambda: got, 5)
        assert got == [(1, b"v6 only", B6)]
        lst = b.tcp.listen((ANY6, 7), 4)
        conn = net.a.tcp.connect(None, (B6, 7), net.clock.now)
        accepted = []
        net.run(lambda: accepted.append(lst.accept()) or accepted[-1] is not None, 5)
        peer = accepted[-1]
        assert peer.remote_addr == A6 and conn.local_addr == A6
        data = hashlib.sha256(b"six only").digest() * 4000  # 128 KB
        assert _pump(net, conn, peer, data) == data
        assert _pump(net, peer, conn, data[::-1]) == data[::-1]


def test_ipv4_and_arp_are_dropped_as_disabled_and_never_answered():
    with net6only() as net:
        b = net.b
        replies = []
        net.a.icmp.echo_handlers[9] = lambda *a: replies.append(a)
        net.a.icmp.ping(ip_addr("198.18.0.2"), 9, 1, net.clock.now, b"anyone?")
        net.run(lambda: False, 4)  # ARP retries for 198.18.0.2 all go unanswered
        assert replies == []
        assert b.stats["drop.ipv4.disabled"] >= 3  # the ARP requests
        assert b.stats["arp.replies_sent"] == 0 and b.stats["eth.frames_sent"] == net.link.b.counters["tx"]
        assert not any(k.startswith(("arp.", "icmp.")) for k in b.stats.snapshot())


def test_ipv4_destinations_are_unreachable_and_the_wildcard_binds():
    with net6only() as net:
        b = net.b
        ep = b.udp.endpoint()
        b.udp.bind(ep, ANY4, 5000)  # 0.0.0.0 may be bound (as Linux without an IPv4 address)
        with pytest.raises(OSError) as e:
            ep.sendto(b"x", A4, 7, net.clock.now)
        assert e.value.errno == errno.ENETUNREACH
        ep.broadcast = True
        with pytest.raises(OSError) as e:
            ep.sendto(b"x", ip_addr("255.255.255.255"), 7, net.clock.now)
        assert e.value.errno == errno.ENETUNREACH
        s = usocket(net.db, std.AF_INET)
        with pytest.raises(OSError) as e:
            s.connect(("198.18.0.1", 7))
        assert e.value.errno == errno.ENETUNREACH
        s.close()


def test_snapshot_of_an_ipv6_only_stack():
    with net6only() as net:
        snap = net.b.snapshot(net.clock.now)
        assert (snap["stack"]["addr"], snap["stack"]["prefixlen"], snap["stack"]["gateway"]) == ("fd00::2", 64, None)
        assert snap["arp"] == [] and "fd00::2/64" in [a["addr"] for a in snap["ipv6"]["addresses"]]


def test_constructor_checks():
    clock = ManualClock(0.0)
    link = PipeLink(clock)
    with pytest.raises(ValueError, match="IPv6's minimum link MTU"):
        Stack(link.a, "fd00::2/64", mtu=1000)
    with pytest.raises(ValueError, match="one IPv4 address"):
        Stack(link.a, [])
    with pytest.raises(ValueError, match="IPv4 gateway needs an IPv4 address"):
        Stack(link.a, "fd00::2/64", gateway="198.18.0.1")
    with pytest.raises(ValueError, match="one IPv4 address"):
        Stack(link.a, ["198.18.0.1/24", "198.18.0.2/24"])
    link.close()
