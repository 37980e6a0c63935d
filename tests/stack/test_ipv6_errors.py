"""ICMPv6 errors surfaced on TCP over IPv6 (RFC 4443 + RFC 8201 + RFC 5927), two stacks over the pipe."""

from __future__ import annotations

import struct

from scapy.layers.inet6 import ICMPv6DestUnreach, ICMPv6PacketTooBig, IPv6
from scapy.layers.l2 import Ether

from ustack.net.addr import ANY6
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
        _error(net, ICMPv6PacketTooBig(mtu=1300), conn, (conn.tcb.snd_una + 1 << 31) & 0xFFFFFFFF)
        assert conn.tcb.mss_base == 1440 and net.b.stats["drop.tcp.icmp_bad_seq"] == 1  # RFC 5927: forged
        assert net.b.ipv6.mtu(A6) == 1300  # the path MTU itself is the IP layer's (RFC 8201)
        _error(net, ICMPv6PacketTooBig(mtu=1300), conn, conn.tcb.snd_una)
        assert conn.tcb.mss_base == 1300 - 60 and net.b.stats["tcp.pmtu_reductions"] == 1
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
