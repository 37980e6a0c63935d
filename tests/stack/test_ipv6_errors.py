"""ICMPv6 errors surfaced on TCP over IPv6 (RFC 4443 + RFC 8201 + RFC 5927), two stacks over the pipe."""

from __future__ import annotations

import struct

from scapy.layers.inet6 import ICMPv6DestUnreach, ICMPv6PacketTooBig, IPv6
from scapy.layers.l2 import Ether

from ustack.net.addr import ANY6, parse as ip_addr
from ustack.transport.tcp.tcb import State

from .test_ipv6 import A6, B6, net6


def _error(net, layer, conn, seq):
    quoted = bytes(IPv6(src="fd00::2", dst="fd00::1", nh=6, plen=20)) + struct.pack(
        "!HHIIBBHHH", conn.local_port, conn.remote_port, seq, 0, 0x50, 0x10, 1000, 0, 0)
    frame = Ether(src=net.a.iface.mac, dst=net.b.iface.mac) / IPv6(src="fd00::1", dst="fd00::2") / layer / quoted
    net.link.b._deliver(net.clock.now, bytes(frame))
    net.b.poll(net.clock.now)


def test_packet_too_big_lowers_the_tcp_mss_and_the_transfer_completes():
    with net6() as net:
        lst = net.a.tcp.listen((ANY6, 80), 4)
        conn = net.b.tcp.connect(None, (A6, 80), net.clock.now)
        assert net.run(lambda: conn.state == State.ESTABLISHED, 5)
        assert conn.tcb.mss_base == 1440
        data = bytes(range(256)) * 400
        conn.send(data, net.clock.now)
        net.b.poll(net.clock.now)  # segments in flight, not yet acknowledged
        gen = net.b.ipv6.gen.value
        _error(net, ICMPv6PacketTooBig(mtu=1300), conn, (conn.tcb.snd_una + 1 << 31) & 0xFFFFFFFF)
        assert conn.tcb.mss_base == 1440 and net.b.stats["drop.tcp.icmp_bad_seq"] == 1  # RFC 5927: forged
        # ... and checked before the path MTU moves (issue 25 item 5): no entry, no template thrown away
        assert net.b.ipv6.mtu(A6) == 1500 and net.b.stats["ipv6.pmtu_reductions"] == 0
        assert net.b.ipv6.gen.value == gen
        _error(net, ICMPv6PacketTooBig(mtu=1300), conn, conn.tcb.snd_una)
        assert conn.tcb.mss_base == 1300 - 60 and net.b.stats["tcp.pmtu_reductions"] == 1
        assert net.b.ipv6.mtu(A6) == 1300 and net.b.ipv6.gen.value > gen  # the path MTU is the IP layer's
        got = bytearray()
        server = []

        def done():
            if not server:
                s = lst.accept()
                if s is not None:
                    server.append(s)
            if server:
                got.extend(server[0].recv(1 << 20, net.clock.now))
            return len(got) == len(data)
        assert net.run(done, 10) and bytes(got) == data


def test_destination_unreachable_fails_a_connect_in_syn_sent():
    with net6() as net:
        conn = net.b.tcp.connect(None, (A6, 81), net.clock.now)
        net.b.poll(net.clock.now)
        _error(net, ICMPv6DestUnreach(code=1), conn, conn.tcb.snd_una)  # administratively prohibited
        assert conn.state == State.CLOSED
        err = conn.take_error()
        assert err is not None


def test_packet_too_big_without_a_connection_lowers_that_destination_only():
    """A PTB quoting a flow no connection has (here to fd00::3, never spoken to) lowers that destination's
    path MTU and nothing else: the templates of the flows to A stand (issue 25 item 5: every cached
    template was thrown away and any destination could be pinned at 1280 without a check)."""
    with net6() as net:
        lst = net.a.tcp.listen((ANY6, 80), 4)
        conn = net.b.tcp.connect(None, (A6, 80), net.clock.now)
        assert net.run(lambda: conn.state == State.ESTABLISHED and lst.pending > 0, 5)
        gen = net.b.ipv6.gen.value
        other = "fd00::3"
        quoted = bytes(IPv6(src="fd00::2", dst=other, nh=6, plen=20)) + struct.pack(
            "!HHIIBBHHH", 40000, 443, 12345, 0, 0x50, 0x10, 1000, 0, 0)
        frame = (Ether(src=net.a.iface.mac, dst=net.b.iface.mac) / IPv6(src="fd00::1", dst="fd00::2")
                 / ICMPv6PacketTooBig(mtu=1280) / quoted)
        net.link.b._deliver(net.clock.now, bytes(frame))
        net.b.poll(net.clock.now)
        assert net.b.ipv6.mtu(ip_addr(other)) == 1280 and net.b.stats["ipv6.pmtu_reductions"] == 1
        assert net.b.ipv6.mtu(A6) == 1500 and net.b.ipv6.gen.value == gen
        assert net.b.stats["drop.tcp.icmp_no_connection"] == 1 and conn.tcb.mss_base == 1440
